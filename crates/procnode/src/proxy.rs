//! Services as local TCP listeners, as kube-proxy would route them: each
//! Service port gets a listener on 127.0.0.1 that forwards every new
//! connection to a ready endpoint of the Service's EndpointSlices (in turn).
//! Where each listens is written to `<state>/services.json`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::net::{TcpListener, TcpStream};

/// One Service port's listener.
struct Listener {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// The key of a Service port: namespace, name, port name (or number).
type Key = (String, String, String);

fn ready_endpoints(
    slices: &Store<EndpointSlice>,
    ns: &str,
    svc: &str,
    port_name: &str,
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for s in slices.state() {
        if s.metadata.namespace.as_deref() != Some(ns)
            || s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .map(String::as_str)
                != Some(svc)
        {
            continue;
        }
        let Some(port) = s
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
        else {
            continue;
        };
        for e in &s.endpoints {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                if let Ok(ip) = a.parse() {
                    out.push(SocketAddr::new(ip, port as u16));
                }
            }
        }
    }
    out.sort();
    out
}

async fn serve(
    listener: TcpListener,
    slices: Store<EndpointSlice>,
    ns: String,
    svc: String,
    port_name: String,
) {
    let turn = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let eps = ready_endpoints(&slices, &ns, &svc, &port_name);
        let first = turn.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let mut client = client;
            for i in 0..eps.len() {
                let to = eps[(first + i) % eps.len()];
                if let Ok(Ok(mut up)) =
                    tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(to)).await
                {
                    let _ = up.set_nodelay(true);
                    let _ = client.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                    return;
                }
            }
            // No ready endpoint: the connection is refused (closed).
        });
    }
}

/// Keep a listener per Service port, and `services.json` up to date.
pub async fn run(client: kube::Client, state: PathBuf) -> anyhow::Result<()> {
    let (svc_store, svc_writer) = reflector::store::<Service>();
    let (eps_store, eps_writer) = reflector::store::<EndpointSlice>();
    let svc_stream = reflector::reflector(
        svc_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let eps_stream = reflector::reflector(
        eps_writer,
        watcher(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    tokio::spawn(eps_stream.for_each(|_| async {}));
    let mut svc_events = Box::pin(svc_stream);
    let mut listeners: BTreeMap<Key, Listener> = BTreeMap::new();
    let mut written = String::new();
    loop {
        // Wake on a Service change, or at least every second.
        let _ = tokio::time::timeout(Duration::from_secs(1), svc_events.next()).await;
        let mut want: BTreeMap<Key, ()> = BTreeMap::new();
        for s in svc_store.state() {
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            let name = s.metadata.name.clone().unwrap_or_default();
            for p in s.spec.iter().flat_map(|sp| sp.ports.iter().flatten()) {
                let pname = p.name.clone().unwrap_or_default();
                want.insert((ns.clone(), name.clone(), pname), ());
            }
        }
        listeners.retain(|k, l| {
            let keep = want.contains_key(k);
            if !keep {
                l.task.abort();
            }
            keep
        });
        for k in want.keys() {
            if listeners.contains_key(k) {
                continue;
            }
            let l = TcpListener::bind("127.0.0.1:0").await?;
            let addr = l.local_addr()?;
            let task = tokio::spawn(serve(
                l,
                eps_store.clone(),
                k.0.clone(),
                k.1.clone(),
                k.2.clone(),
            ));
            listeners.insert(k.clone(), Listener { addr, task });
        }
        let mut map: BTreeMap<String, String> = BTreeMap::new();
        for ((ns, name, port), l) in &listeners {
            let base = format!("{ns}/{name}");
            let first = !map.contains_key(&base);
            if first {
                map.insert(base.clone(), l.addr.to_string());
            }
            if !port.is_empty() {
                map.insert(format!("{base}:{port}"), l.addr.to_string());
            }
        }
        let text = serde_json::to_string_pretty(&map)?;
        if text != written {
            let tmp = state.join(".services.json.tmp");
            std::fs::write(&tmp, &text)?;
            std::fs::rename(&tmp, state.join("services.json"))?;
            written = text;
        }
    }
}
