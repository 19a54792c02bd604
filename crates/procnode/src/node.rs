//! The Node object and its heartbeat (a Lease in `kube-node-lease` and the
//! Ready condition), and the binding of Pending Pods that name no node.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

const MANAGER: &str = "cnmysql-procnode";

pub fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("cnmysql.io/procnode".to_string(), "true".to_string()),
    ])
}

fn status(ready: bool) -> serde_json::Value {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    let cond = |t: &str, s: bool, reason: &str| {
        json!({"type": t, "status": if s {"True"} else {"False"}, "reason": reason,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).map(String::from))
        })
        .unwrap_or_else(|| "8000000".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let capacity = json!({"cpu": cpus.to_string(), "memory": format!("{mem_kib}Ki"), "pods": "110", "ephemeral-storage": "100Gi"});
    json!({"status": {
        "conditions": [
            cond("Ready", ready, if ready {"KubeletReady"} else {"KubeletNotReady"}),
            cond("MemoryPressure", false, "KubeletHasSufficientMemory"),
            cond("DiskPressure", false, "KubeletHasNoDiskPressure"),
            cond("PIDPressure", false, "KubeletHasSufficientPID"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "capacity": capacity,
        "allocatable": capacity,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": "", "osImage": "cnmysql process node",
            "containerRuntimeVersion": "procnode://0.1.0",
            "kubeletVersion": "v1.28.0-procnode", "kubeProxyVersion": "v1.28.0-procnode",
            "operatingSystem": "linux", "architecture": "amd64",
        },
    }})
}

/// Register the Node (or take over an existing one of the same name).
pub async fn register(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(name)),
            ..Default::default()
        },
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("registering the Node"),
    }
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status(true)))
        .await
        .context("reporting the Node's status")?;
    Ok(())
}

/// Renew the node Lease and the Ready condition every 10 s.
pub async fn heartbeat(client: kube::Client, name: String) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..Default::default()
            }),
        };
        if let Err(e) = leases
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            tracing::warn!(error = %e, "renewing the node lease");
        }
        if let Err(e) = nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status(true)))
            .await
        {
            tracing::warn!(error = %e, "reporting the node's status");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

fn fits(p: &Pod, node_labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &p.spec else { return false };
    let ours = spec
        .scheduler_name
        .as_deref()
        .is_none_or(|s| s == "default-scheduler");
    let selected = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k) == Some(v));
    ours && selected
}

/// Bind every Pending Pod that names no node to this one (it is the only
/// node), unless its nodeSelector does not match.
pub async fn schedule(client: kube::Client, name: String) {
    let pods: Api<Pod> = Api::all(client.clone());
    let node_labels = labels(&name);
    let cfg = watcher::Config::default().fields("spec.nodeName=,status.phase=Pending");
    let mut events = Box::pin(watcher(pods, cfg).default_backoff());
    while let Some(ev) = events.next().await {
        let pod = match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "watching unscheduled pods");
                continue;
            }
        };
        if !fits(&pod, &node_labels) || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (ns, pname) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pname.clone()),
                namespace: Some(ns.clone()),
                uid: None,
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                ..Default::default()
            },
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        match api
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &pname,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{pname}"), node = name, "bound"),
            Err(e) => tracing::warn!(pod = %format!("{ns}/{pname}"), error = %e, "binding failed"),
        }
    }
}
