//! A container's environment, as the kubelet builds it: the image's PATH,
//! `KUBERNETES_SERVICE_HOST`/`PORT`, `envFrom`, then `env` with values,
//! downward-API fields, Secret and ConfigMap keys, and `$(VAR)` references.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;

/// The value of a downward-API field path.
pub fn field_value(pod: &Pod, pod_ip: &str, path: &str) -> anyhow::Result<String> {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let map_key = |prefix: &str, map: &Option<BTreeMap<String, String>>| -> Option<String> {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(
            map.as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default(),
        )
    };
    if let Some(v) = map_key("metadata.labels['", &m.labels) {
        return Ok(v);
    }
    if let Some(v) = map_key("metadata.annotations['", &m.annotations) {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_string(),
        "metadata.labels" => fmt_map(&m.labels),
        "metadata.annotations" => fmt_map(&m.annotations),
        other => bail!("downward API field {other:?} is not supported"),
    })
}

fn fmt_map(m: &Option<BTreeMap<String, String>>) -> String {
    m.iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replace `$(NAME)` with NAME's value when it is defined; `$$` is `$`.
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(end) = tail.strip_prefix("$(").and_then(|t| t.find(')'))
            && let Some(v) = vars.get(&tail[2..2 + end])
        {
            out.push_str(v);
            rest = &tail[3 + end..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The default PATH of an image (Debian's, as in the official images).
pub const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Build a container's environment.
pub async fn build(
    client: &kube::Client,
    pod: &Pod,
    pod_ip: &str,
    c: &Container,
    api: (&str, u16),
    path_prefix: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    let path = match path_prefix {
        Some(p) => format!("{p}:{IMAGE_PATH}"),
        None => IMAGE_PATH.to_string(),
    };
    set(&mut vars, "PATH".into(), path);
    set(
        &mut vars,
        "HOSTNAME".into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    set(&mut vars, "KUBERNETES_SERVICE_HOST".into(), api.0.into());
    set(
        &mut vars,
        "KUBERNETES_SERVICE_PORT".into(),
        api.1.to_string(),
    );
    set(
        &mut vars,
        "KUBERNETES_SERVICE_PORT_HTTPS".into(),
        api.1.to_string(),
    );
    set(
        &mut vars,
        "KUBERNETES_PORT".into(),
        format!("tcp://{}:{}", api.0, api.1),
    );

    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data: BTreeMap<String, String> = if let Some(s) = &from.secret_ref {
            match Api::<Secret>::namespaced(client.clone(), &ns)
                .get_opt(&s.name)
                .await?
            {
                Some(sec) => sec
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect(),
                None if s.optional.unwrap_or(false) => BTreeMap::new(),
                None => bail!("envFrom: Secret {ns}/{} does not exist", s.name),
            }
        } else if let Some(m) = &from.config_map_ref {
            match Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .get_opt(&m.name)
                .await?
            {
                Some(cm) => cm.data.unwrap_or_default(),
                None if m.optional.unwrap_or(false) => BTreeMap::new(),
                None => bail!("envFrom: ConfigMap {ns}/{} does not exist", m.name),
            }
        } else {
            BTreeMap::new()
        };
        for (k, v) in data {
            set(&mut vars, format!("{prefix}{k}"), v);
        }
    }

    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            expand(v, &vars)
        } else if let Some(src) = &e.value_from {
            if let Some(f) = &src.field_ref {
                field_value(pod, pod_ip, &f.field_path)?
            } else if let Some(r) = &src.resource_field_ref {
                resource_value(c, &r.resource)
            } else if let Some(s) = &src.secret_key_ref {
                let sec = Api::<Secret>::namespaced(client.clone(), &ns)
                    .get_opt(&s.name)
                    .await?;
                match sec
                    .and_then(|x| x.data)
                    .and_then(|d| d.get(&s.key).cloned())
                {
                    Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                    None if s.optional.unwrap_or(false) => continue,
                    None => bail!(
                        "env {}: key {} of Secret {ns}/{} is missing",
                        e.name,
                        s.key,
                        s.name
                    ),
                }
            } else if let Some(m) = &src.config_map_key_ref {
                let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
                    .get_opt(&m.name)
                    .await?;
                match cm.and_then(|x| x.data).and_then(|d| d.get(&m.key).cloned()) {
                    Some(v) => v,
                    None if m.optional.unwrap_or(false) => continue,
                    None => bail!(
                        "env {}: key {} of ConfigMap {ns}/{} is missing",
                        e.name,
                        m.key,
                        m.name
                    ),
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut vars, e.name.clone(), value);
    }
    let mut out = Vec::new();
    for k in order {
        let v = vars
            .get(&k)
            .cloned()
            .context("an environment variable vanished")?;
        out.push((k, v));
    }
    Ok(out)
}

fn resource_value(c: &Container, resource: &str) -> String {
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let r = c.resources.clone().unwrap_or_default();
    let map = if kind == "requests" {
        r.requests
    } else {
        r.limits
    };
    map.and_then(|m| m.get(name).map(|q| q.0.clone()))
        .unwrap_or_else(|| match name {
            "cpu" => "2".into(),
            _ => (24u64 << 30).to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_expanded_and_dollars_escaped() {
        let vars = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
    }
}
