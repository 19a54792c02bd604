//! Serving the manager's HTTP endpoints: mutual TLS on the control port
//! (and server-only TLS for `cnmysql donor`), plain HTTP for the kubelet's
//! probes. Every connection is bounded: a handshake and a request's
//! headers must arrive within a deadline, so nobody holds a connection
//! open by sending nothing, and a listener serves at most so many at once
//! (one more is closed at once).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::Service;

use crate::api::Peer;

/// How much a listener lets its callers hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; more are closed as they come.
    pub max_connections: usize,
    /// For the TLS handshake, and for each request's headers (an idle
    /// kept-alive connection too).
    pub header_timeout: Duration,
    /// Serve more than one request on a connection.
    pub keep_alive: bool,
    /// Connections one address may hold at once (plain HTTP): a stranger
    /// filling the listener cannot crowd the kubelet's probes out.
    pub per_source: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            keep_alive: true,
            per_source: usize::MAX,
        }
    }
}

/// Holds the control API still before the manager re-executes itself: no
/// connection is accepted (new ones wait in the backlog of the listening
/// socket, which the next image inherits), and those already open are given
/// a moment to finish, so no request is cut off by the exec.
#[derive(Default)]
pub struct Gate {
    /// True while either hold below is on: accept nothing.
    hold: watch::Sender<bool>,
    /// Before a re-exec.
    quiescing: std::sync::atomic::AtomicBool,
    /// A new image that has not yet taken up the running server.
    adopting: std::sync::atomic::AtomicBool,
    open: std::sync::atomic::AtomicUsize,
}

impl Gate {
    fn update(&self) {
        use std::sync::atomic::Ordering;
        let on = self.quiescing.load(Ordering::SeqCst) || self.adopting.load(Ordering::SeqCst);
        self.hold
            .send_if_modified(|h| std::mem::replace(h, on) != on);
    }

    /// Stop accepting; wait up to `timeout` for open connections to close.
    /// Returns how many are still open.
    pub async fn quiesce(&self, timeout: Duration) -> usize {
        use std::sync::atomic::Ordering;
        self.quiescing.store(true, Ordering::SeqCst);
        self.update();
        let deadline = tokio::time::Instant::now() + timeout;
        while self.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.open.load(Ordering::SeqCst)
    }

    /// The exec failed: accept again.
    pub fn release(&self) {
        self.quiescing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.update();
    }

    /// Start held: a new image that adopted a running mysqld answers only
    /// once it knows its state, so nobody sees it "starting" meanwhile.
    pub fn hold_until_adopted(&self) {
        self.adopting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.update();
    }

    /// The adopted server's state is known (or the wait is over).
    pub fn adopted(&self) {
        self.adopting
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.update();
    }
}

struct Open(Arc<Gate>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Accept TLS connections until `shutdown` turns true; the client
/// certificate's identity, when one was presented, goes with each request
/// as a [`Peer`].
pub async fn serve(
    listener: TcpListener,
    tls: watch::Receiver<Arc<ServerConfig>>,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    gate: Arc<Gate>,
    limits: Limits,
) {
    let mut hold = gate.hold.subscribe();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        if *hold.borrow_and_update() {
            tokio::select! {
                _ = hold.changed() => continue,
                _ = crate::stopped(&mut shutdown) => break,
            }
        }
        let (tcp, addr) = tokio::select! {
            _ = hold.changed() => continue,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = crate::stopped(&mut shutdown) => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%addr, limit = limits.max_connections, "connection refused: too many open");
            continue;
        };
        // The newest certificate for each new connection.
        let acceptor = TlsAcceptor::from(tls.borrow().clone());
        let app = app.clone();
        gate.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let open = Open(gate.clone());
        tokio::spawn(async move {
            let _open = (open, slot);
            let _ = tcp.set_nodelay(true);
            let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(tcp));
            let tls = match handshake.await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%addr, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let peer = Peer::of(tls.get_ref().1.peer_certificates());
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(peer.clone());
                let mut app = app.clone();
                let fut: Pin<
                    Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>,
                > = Box::pin(async move { app.call(req).await });
                fut
            });
            let _ = http1(&limits)
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        });
    }
}

/// Accept plain-HTTP connections (the kubelet's probes) until `shutdown`
/// turns true, within `limits`.
pub async fn serve_plain(
    listener: TcpListener,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let sources = Arc::new(Sources::default());
    loop {
        let (tcp, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = crate::stopped(&mut shutdown) => break,
        };
        let Some(source) = sources.clone().take(addr.ip(), limits.per_source) else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let app = app.clone();
        tokio::spawn(async move {
            let _held = (slot, source);
            let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let mut app = app.clone();
                async move { app.call(req).await }
            });
            let _ = http1(&limits)
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}

/// Open connections by source address.
#[derive(Default)]
struct Sources(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection of an address, counted while it lives.
struct Source(Arc<Sources>, std::net::IpAddr);

impl Sources {
    /// Count a connection from `ip`, unless it holds `max` already.
    fn take(self: Arc<Self>, ip: std::net::IpAddr, max: usize) -> Option<Source> {
        let mut open = self.0.lock().unwrap();
        let n = open.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        drop(open);
        Some(Source(self, ip))
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        let mut open = self.0.0.lock().unwrap();
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

fn http1(limits: &Limits) -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(limits.keep_alive);
    b
}

#[cfg(test)]
mod gate_tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_quiesced_gate_stays_shut_whatever_the_phase_does() {
        let g = Gate::default();
        let held = |g: &Gate| *g.hold.borrow();
        g.hold_until_adopted();
        assert!(held(&g));
        g.adopted();
        assert!(!held(&g));
        // Before a re-exec: the manager's reconcile reporting its phase
        // (adopted) must not open the gate again.
        assert_eq!(g.quiesce(Duration::from_millis(10)).await, 0);
        g.adopted();
        assert!(held(&g));
        g.release();
        assert!(!held(&g));
    }

    #[test]
    fn one_address_holds_only_so_many_connections() {
        let sources = Arc::new(Sources::default());
        let a: std::net::IpAddr = "10.0.0.9".parse().unwrap();
        let b: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..4)
            .map(|_| sources.clone().take(a, 4).unwrap())
            .collect();
        assert!(sources.clone().take(a, 4).is_none());
        assert!(
            sources.clone().take(b, 4).is_some(),
            "another address is served"
        );
        drop(held);
        assert!(sources.clone().take(a, 4).is_some());
        assert!(sources.0.lock().unwrap().len() <= 1);
    }
}
