//! The local stand-in for Services: one TCP listener per Service that
//! forwards each client connection to an instance chosen by role. When an
//! instance leaves a Service's route set, its forwarded connections are
//! closed, so no client keeps talking to a demoted or fenced server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cnmysql_api::ServiceRole;
use cnmysql_core::services::Routes;
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Backends of every Service, as instance names.
pub type RouteTable = BTreeMap<String, Vec<String>>;

/// Build the table for all Services from the role routes.
pub fn table(routes: &Routes, services: &[(String, ServiceRole)]) -> RouteTable {
    services
        .iter()
        .map(|(name, role)| (name.clone(), routes.for_role(*role)))
        .collect()
}

pub struct Proxy {
    pub service: String,
    listener: TcpListener,
}

impl Proxy {
    pub async fn bind(service: &str, host: &str, port: u16) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind((host, port)).await.map_err(|e| {
            anyhow::anyhow!("cannot listen for the {service} endpoint on {host}:{port}: {e}")
        })?;
        Ok(Proxy {
            service: service.to_string(),
            listener,
        })
    }

    /// Forward connections until the process ends.
    pub async fn run(
        self,
        routes: watch::Receiver<RouteTable>,
        addrs: Arc<BTreeMap<String, (String, u16)>>,
    ) {
        let next = Arc::new(AtomicUsize::new(0));
        loop {
            let Ok((client, _)) = self.listener.accept().await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let backends = routes
                .borrow()
                .get(&self.service)
                .cloned()
                .unwrap_or_default();
            if backends.is_empty() {
                // No backend: close at once, so the client sees an error
                // instead of a hang.
                drop(client);
                continue;
            }
            let pick = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()].clone();
            let Some((host, port)) = addrs.get(&pick).cloned() else {
                continue;
            };
            let mut routes = routes.clone();
            let service = self.service.clone();
            tokio::spawn(async move {
                let Ok(mut server) = TcpStream::connect((host.as_str(), port)).await else {
                    return;
                };
                let _ = server.set_nodelay(true);
                let mut client = client;
                tokio::select! {
                    _ = copy_bidirectional(&mut client, &mut server) => {}
                    _ = async {
                        loop {
                            if routes.changed().await.is_err() { break; }
                            let still = routes.borrow().get(&service).is_some_and(|b| b.contains(&pick));
                            if !still { break; }
                        }
                    } => {
                        tracing::info!(service, instance = pick, "closing a client connection: the instance left the route");
                    }
                }
            });
        }
    }
}
