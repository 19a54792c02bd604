//! Where the Services route, as their EndpointSlices say (the operator writes them):
//! a watch on a namespace's EndpointSlices that keeps when each changed
//! and to which ready addresses, so a write gap can be laid beside the
//! routing changes that kube-proxy turned into rules (at most once a
//! second) around it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, WatchEvent, WatchParams};

/// One change of one Service's endpoints: when, which Service, and its
/// endpoints (`db-2` ready, `db-1?` not ready).
pub type Change = (Instant, String, String);

pub struct Routes {
    seen: Arc<Mutex<Vec<Change>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Routes {
    /// Starts watching `ns`'s EndpointSlices.
    pub async fn watch(client: kube::Client, ns: &str) -> anyhow::Result<Routes> {
        let api: Api<EndpointSlice> = Api::namespaced(client, ns);
        let rv = api
            .list_metadata(&Default::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        let task = tokio::spawn(async move {
            let Ok(stream) = api.watch(&WatchParams::default(), &rv).await else {
                return;
            };
            let mut stream = std::pin::pin!(stream);
            let mut last: BTreeMap<String, String> = BTreeMap::new();
            while let Some(Ok(ev)) = stream.next().await {
                let (WatchEvent::Added(s) | WatchEvent::Modified(s)) = ev else {
                    continue;
                };
                let (service, to) = describe(&s);
                if last.get(&service) != Some(&to) {
                    last.insert(service.clone(), to.clone());
                    keep.lock().unwrap().push((Instant::now(), service, to));
                }
            }
        });
        Ok(Routes { seen, task })
    }

    /// Every change seen from `from` on, in order.
    pub fn since(&self, from: Instant) -> Vec<Change> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|c| c.0 >= from).cloned().collect()
    }

    /// The changes from `from` to `to`, one line each, times relative to
    /// `zero`.
    pub fn between(&self, zero: Instant, from: Instant, to: Instant) -> String {
        let seen = self.seen.lock().unwrap();
        let mut out = String::new();
        for (t, service, eps) in seen.iter().filter(|c| c.0 >= from && c.0 <= to) {
            let at = if *t >= zero {
                (*t - zero).as_secs_f64()
            } else {
                -(zero - *t).as_secs_f64()
            };
            out.push_str(&format!("    {at:+.3}s {service}: [{eps}]\n"));
        }
        out
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Service a slice belongs to and its endpoints by Pod name.
fn describe(s: &EndpointSlice) -> (String, String) {
    let service = s
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/service-name"))
        .cloned()
        .unwrap_or_default();
    let mut eps: Vec<String> = s
        .endpoints
        .iter()
        .map(|e| {
            let name = e
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            let ready = e.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            format!("{name}{}", if ready { "" } else { "?" })
        })
        .collect();
    eps.sort();
    (service, eps.join(" "))
}
