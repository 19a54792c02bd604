//! An in-memory Kubernetes API for API-call scenarios: Clusters (get, and
//! merge patches of the status subresource with the API server's
//! resourceVersion precondition), Pods (list by label equality, create) and
//! Events (create). Every call is logged so
//! a test can assert exactly what a command sent. It answers both an
//! in-process `kube::Client` and real HTTP (for the binary, via a
//! kubeconfig), from the same handler.

use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// One request as the API server saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
    pub status: u16,
}

type Hook = Box<dyn FnOnce(&mut Value) + Send>;

#[derive(Default)]
struct State {
    /// (namespace, name) → Cluster object.
    clusters: Vec<((String, String), Value)>,
    /// (namespace, name) → Pod object.
    pods: Vec<((String, String), Value)>,
    events: Vec<Value>,
    calls: Vec<Call>,
    resource_version: u64,
    /// Runs against the stored Cluster just before the next status patch is
    /// handled, as if another writer got there first.
    before_next_patch: Vec<Hook>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

const CLUSTERS: &str = "/apis/mysql.cnmysql.io/v1/namespaces/";

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// Store a Cluster (a full object, e.g. from `serde_json::to_value`).
    pub fn put_cluster(&self, mut cluster: Value) {
        let mut st = self.state.lock().unwrap();
        st.resource_version += 1;
        let rv = st.resource_version.to_string();
        let ns = cluster["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = cluster["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        cluster["metadata"]["resourceVersion"] = json!(rv);
        cluster["metadata"]["namespace"] = json!(ns);
        cluster["metadata"]["uid"] = json!(format!("uid-{ns}-{name}"));
        st.clusters
            .retain(|(k, _)| k != &(ns.clone(), name.clone()));
        st.clusters.push(((ns, name), cluster));
    }

    pub fn cluster(&self, namespace: &str, name: &str) -> Option<Value> {
        let st = self.state.lock().unwrap();
        st.clusters
            .iter()
            .find(|(k, _)| k.0 == namespace && k.1 == name)
            .map(|(_, v)| v.clone())
    }

    /// Store a Pod as if some client had created it.
    pub fn put_pod(&self, pod: Value) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let _ = self.create_pod(&ns, pod);
    }

    /// The names of the Pods in `namespace`, sorted.
    pub fn pods(&self, namespace: &str) -> Vec<String> {
        let st = self.state.lock().unwrap();
        let mut names: Vec<String> = st
            .pods
            .iter()
            .filter(|(k, _)| k.0 == namespace)
            .map(|(k, _)| k.1.clone())
            .collect();
        names.sort();
        names
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// Let another writer change the Cluster just before the next status
    /// patch arrives (which then conflicts).
    pub fn before_next_patch(&self, hook: impl FnOnce(&mut Value) + Send + 'static) {
        self.state
            .lock()
            .unwrap()
            .before_next_patch
            .push(Box::new(hook));
    }

    /// Answer one request.
    pub fn handle(
        &self,
        method: Method,
        path: &str,
        content_type: Option<String>,
        body: &[u8],
    ) -> (StatusCode, Value) {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let (code, answer) = self.route(&method, path, content_type.as_deref(), parsed.as_ref());
        self.state.lock().unwrap().calls.push(Call {
            method,
            path: path.split('?').next().unwrap_or(path).to_string(),
            content_type,
            body: parsed,
            status: code.as_u16(),
        });
        (code, answer)
    }

    fn route(
        &self,
        method: &Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        if let Some(rest) = path.strip_prefix("/api/v1/namespaces/")
            && let Some((ns, "pods")) = rest.split_once('/')
        {
            match *method {
                Method::GET => return self.list_pods(ns, query),
                Method::POST => return self.create_pod(ns, body.cloned().unwrap_or(Value::Null)),
                _ => {}
            }
        }
        if let Some(rest) = path.strip_prefix("/api/v1/namespaces/")
            && let [ns, "pods", name] = rest.split('/').collect::<Vec<_>>().as_slice()
            && method == Method::PATCH
        {
            if content_type != Some("application/merge-patch+json") {
                return failure(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "this fake takes merge patches only",
                );
            }
            return self.patch_metadata(false, ns, name, body.cloned().unwrap_or(Value::Null));
        }
        if let Some(rest) = path.strip_prefix(CLUSTERS) {
            let parts: Vec<&str> = rest.split('/').collect();
            match (method, parts.as_slice()) {
                (&Method::GET, [ns, "clusters", name]) => return self.get(ns, name),
                (&Method::PATCH, [ns, "clusters", name]) => {
                    if content_type != Some("application/merge-patch+json") {
                        return failure(
                            StatusCode::UNSUPPORTED_MEDIA_TYPE,
                            "UnsupportedMediaType",
                            "this fake takes merge patches only",
                        );
                    }
                    return self.patch_metadata(
                        true,
                        ns,
                        name,
                        body.cloned().unwrap_or(Value::Null),
                    );
                }
                (&Method::PATCH, [ns, "clusters", name, "status"]) => {
                    if content_type != Some("application/merge-patch+json") {
                        return failure(
                            StatusCode::UNSUPPORTED_MEDIA_TYPE,
                            "UnsupportedMediaType",
                            "this fake takes merge patches only",
                        );
                    }
                    return self.patch_status(ns, name, body.cloned().unwrap_or(Value::Null));
                }
                _ => {}
            }
        }
        if let Some(rest) = path.strip_prefix("/apis/events.k8s.io/v1/namespaces/")
            && method == Method::POST
            && rest.ends_with("/events")
        {
            let mut ev = body.cloned().unwrap_or(Value::Null);
            let mut st = self.state.lock().unwrap();
            st.resource_version += 1;
            let n = st.events.len();
            if let Some(prefix) = ev["metadata"]["generateName"].as_str() {
                // As the API server does: the prefix, with any trailing dash
                // masked, must itself be a valid name.
                let masked = prefix
                    .strip_suffix('-')
                    .map_or(prefix.to_string(), |p| format!("{p}a"));
                if !is_dns_subdomain(&masked) {
                    return failure(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!(
                            "Event is invalid: metadata.generateName: Invalid value: {prefix:?}"
                        ),
                    );
                }
                ev["metadata"]["name"] = json!(format!("{prefix}{n:05}"));
            }
            st.events.push(ev.clone());
            return (StatusCode::CREATED, ev);
        }
        failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the fake API does not serve {method} {path}"),
        )
    }

    fn get(&self, ns: &str, name: &str) -> (StatusCode, Value) {
        match self.cluster(ns, name) {
            Some(c) => (StatusCode::OK, c),
            None => failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("clusters.mysql.cnmysql.io \"{name}\" not found"),
            ),
        }
    }

    fn list_pods(&self, ns: &str, query: &str) -> (StatusCode, Value) {
        // Equality terms only (`a=b,c=d`), as the operator uses them.
        let selector: Vec<(String, String)> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "labelSelector")
            .flat_map(|(_, v)| {
                percent_decode(v)
                    .split(',')
                    .filter_map(|t| {
                        t.split_once('=')
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let st = self.state.lock().unwrap();
        let items: Vec<Value> = st
            .pods
            .iter()
            .filter(|(k, _)| k.0 == ns)
            .map(|(_, p)| p)
            .filter(|p| {
                selector
                    .iter()
                    .all(|(k, v)| p["metadata"]["labels"][k].as_str() == Some(v))
            })
            .cloned()
            .collect();
        (
            StatusCode::OK,
            json!({
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": { "resourceVersion": st.resource_version.to_string() },
                "items": items,
            }),
        )
    }

    fn create_pod(&self, ns: &str, mut pod: Value) -> (StatusCode, Value) {
        let mut st = self.state.lock().unwrap();
        let Some(name) = pod["metadata"]["name"].as_str().map(str::to_string) else {
            return failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "Pod is invalid: metadata.name: Required value",
            );
        };
        if st.pods.iter().any(|(k, _)| k.0 == ns && k.1 == name) {
            return failure(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("pods \"{name}\" already exists"),
            );
        }
        st.resource_version += 1;
        pod["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["uid"] = json!(format!("uid-{ns}-{name}"));
        st.pods.push(((ns.to_string(), name), pod.clone()));
        (StatusCode::CREATED, pod)
    }

    /// A merge patch of a Cluster's (`cluster`) or a Pod's metadata (the
    /// only part the operator patches on the main resource); the status
    /// is left alone, as the API server does for a resource with a status
    /// subresource.
    fn patch_metadata(
        &self,
        cluster: bool,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> (StatusCode, Value) {
        let mut st = self.state.lock().unwrap();
        let State {
            clusters,
            pods,
            resource_version,
            ..
        } = &mut *st;
        let (objects, kind) = if cluster {
            (clusters, "clusters.mysql.cnmysql.io")
        } else {
            (pods, "pods")
        };
        let Some((_, obj)) = objects.iter_mut().find(|(k, _)| k.0 == ns && k.1 == name) else {
            return failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("{kind} \"{name}\" not found"),
            );
        };
        merge(&mut obj["metadata"], &patch["metadata"]);
        *resource_version += 1;
        obj["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        (StatusCode::OK, obj.clone())
    }

    /// A stored Pod.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        let st = self.state.lock().unwrap();
        st.pods
            .iter()
            .find(|(k, _)| k.0 == namespace && k.1 == name)
            .map(|(_, v)| v.clone())
    }

    fn patch_status(&self, ns: &str, name: &str, patch: Value) -> (StatusCode, Value) {
        let mut st = self.state.lock().unwrap();
        let hooks: Vec<Hook> = st.before_next_patch.drain(..).collect();
        let State {
            clusters,
            resource_version,
            ..
        } = &mut *st;
        let Some((_, obj)) = clusters.iter_mut().find(|(k, _)| k.0 == ns && k.1 == name) else {
            return failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("clusters.mysql.cnmysql.io \"{name}\" not found"),
            );
        };
        for hook in hooks {
            hook(obj);
            *resource_version += 1;
            obj["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        }
        if let Some(want) = patch["metadata"]["resourceVersion"].as_str()
            && obj["metadata"]["resourceVersion"].as_str() != Some(want)
        {
            return failure(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on clusters.mysql.cnmysql.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        // The status subresource ignores everything but the status.
        if obj.get("status").is_none() {
            obj["status"] = json!({});
        }
        merge(&mut obj["status"], &patch["status"]);
        *resource_version += 1;
        obj["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        (StatusCode::OK, obj.clone())
    }

    /// Answer an HTTP request, whatever carried it.
    async fn answer<B>(&self, req: Request<B>) -> Response<Full<Bytes>>
    where
        B: http_body::Body<Data = Bytes>,
    {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let ct = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let (code, v) = self.handle(parts.method.clone(), path, ct, &bytes);
        json_response(code, &v)
    }

    /// An in-process client talking to this fake.
    pub fn client(&self, default_namespace: &str) -> kube::Client {
        let api = self.clone();
        let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.answer(req).await) }
        });
        kube::Client::new(svc, default_namespace)
    }

    /// Serve this fake over plain HTTP on a free loopback port; returns the
    /// server URL. The server lives as long as the runtime.
    pub async fn serve(&self) -> std::io::Result<String> {
        let api = self.clone();
        let app = axum::Router::new().fallback(move |req: Request<axum::body::Body>| {
            let api = api.clone();
            async move {
                let (p, b) = api.answer(req).await.into_parts();
                Response::from_parts(p, axum::body::Body::new(b))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(format!("http://{addr}"))
    }
}

/// A kubeconfig with one context pointing at `server`.
pub fn write_kubeconfig(path: &Path, server: &str, namespace: &str) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\nusers:\n- name: someone\n  user:\n    token: not-a-secret\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: someone\n    namespace: {namespace}\ncurrent-context: fake\n"
        ),
    )
}

/// RFC 1123 subdomain, as Kubernetes object names must be.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `%2F` → `/` and so on (no `+`: selectors do not use it).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_response(code: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(v).unwrap_or_default(),
        )))
        .expect("a valid response")
}

fn failure(code: StatusCode, reason: &str, message: &str) -> (StatusCode, Value) {
    (
        code,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        }),
    )
}

/// JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge(&mut t, &json!({"a": "z", "c": {"f": null}, "l": []}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": []}));
    }
}
