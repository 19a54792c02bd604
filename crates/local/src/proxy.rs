//! The local stand-in for Services: one TCP listener per Service that
//! forwards each client connection to an instance chosen by role.
//!
//! Like a Service, an endpoint with no ready instance behind it refuses
//! connections (its socket stays bound but stops listening) instead of
//! accepting them and hanging up mid-handshake. When an instance leaves a
//! Service's route set, its forwarded connections are closed, so no client
//! keeps talking to a demoted or fenced server.
//!
//! The control plane serves these endpoints, so replacing it (`cnmysql
//! local upgrade`) must not cut clients off: before it re-executes itself
//! it parks every forwarded connection between two reads, and hands the
//! listening sockets and the parked connections to the new image as
//! inherited descriptors ([`Handover`]). Clients see a pause, not an error;
//! new connections wait in the listen backlog meanwhile.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnmysql_api::ServiceRole;
use cnmysql_core::services::Routes;
use cnmysql_instance::inherit;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Backends of every Service, as instance names.
pub type RouteTable = BTreeMap<String, Vec<String>>;

/// Instance name to its server's address.
pub type Addrs = Arc<BTreeMap<String, (String, u16)>>;

/// Build the table for all Services from the role routes.
pub fn table(routes: &Routes, services: &[(String, ServiceRole)]) -> RouteTable {
    services
        .iter()
        .map(|(name, role)| (name.clone(), routes.for_role(*role)))
        .collect()
}

/// Names the endpoints' descriptors handed to the next image of the
/// control plane (JSON of [`Inherited`]).
pub const ADOPT_ENDPOINTS_ENV: &str = "CNMYSQL_ADOPT_ENDPOINTS";

/// Up to this long for every forwarded connection to reach a point where
/// no byte is in flight inside this process; one that does not (its peer
/// stopped reading) is closed by the exec.
const PARK_TIMEOUT: Duration = Duration::from_secs(1);

/// What the endpoints hand across an exec.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Inherited {
    /// Service name to its bound socket.
    pub listeners: BTreeMap<String, RawFd>,
    pub connections: Vec<InheritedConnection>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct InheritedConnection {
    pub service: String,
    pub instance: String,
    pub client: RawFd,
    pub server: RawFd,
}

/// The endpoints of one control plane, serving, and the sender of their
/// routing.
pub struct Endpoints {
    pub handover: Arc<Handover>,
    pub routes: watch::Sender<RouteTable>,
}

impl Endpoints {
    /// Serve every endpoint named in `ports`, routing by `initial` until
    /// the control plane sends a new table.
    pub async fn start(
        ports: &crate::state::Ports,
        initial: RouteTable,
        inherited: Option<Inherited>,
    ) -> anyhow::Result<Endpoints> {
        let addrs: Addrs = Arc::new(
            ports
                .instances
                .iter()
                .map(|(n, p)| (n.clone(), (ports.host.clone(), p.mysql)))
                .collect(),
        );
        let (routes, rx) = watch::channel(initial);
        let handover = Handover::new(rx, addrs);
        let services: Vec<(String, u16)> = ports
            .services
            .iter()
            .map(|(s, p)| (s.clone(), *p))
            .collect();
        handover.serve(&services, &ports.host, inherited).await?;
        Ok(Endpoints { handover, routes })
    }

    /// After an upgrade's exec: take up the endpoints the previous image
    /// handed on, with its last routing, before anything slower is done
    /// (the clients are waiting).
    pub async fn resume(dir: &crate::state::StateDir) -> anyhow::Result<Option<Endpoints>> {
        let Some(inherited) = inherited() else {
            return Ok(None);
        };
        let ports = dir.load_ports()?;
        Ok(Some(
            Endpoints::start(&ports, dir.routes(), Some(inherited)).await?,
        ))
    }
}

/// A forwarded connection stopped between reads, whole.
pub struct Parked {
    service: String,
    instance: String,
    client: std::net::TcpStream,
    server: std::net::TcpStream,
}

/// Shared by every endpoint of one control plane: the signal to park, the
/// connections still moving bytes, those parked, and the listening sockets.
pub struct Handover {
    park: watch::Sender<bool>,
    live: AtomicUsize,
    parked: Mutex<Vec<Parked>>,
    listeners: Mutex<BTreeMap<String, RawFd>>,
    routes: watch::Receiver<RouteTable>,
    addrs: Addrs,
}

impl Handover {
    pub fn new(routes: watch::Receiver<RouteTable>, addrs: Addrs) -> Arc<Handover> {
        Arc::new(Handover {
            park: watch::Sender::new(false),
            live: AtomicUsize::new(0),
            parked: Mutex::new(Vec::new()),
            listeners: Mutex::new(BTreeMap::new()),
            routes,
            addrs,
        })
    }

    /// Start forwarding on every endpoint: adopt what a previous image
    /// handed on (listening sockets and open connections), bind the rest.
    pub async fn serve(
        self: &Arc<Self>,
        services: &[(String, u16)],
        host: &str,
        inherited: Option<Inherited>,
    ) -> anyhow::Result<()> {
        let mut inherited = inherited.unwrap_or_default();
        for (service, port) in services {
            let socket = match inherited.listeners.remove(service) {
                Some(fd) => adopt_fd(fd)?,
                None => bind(service, host, *port)?,
            };
            self.listeners
                .lock()
                .unwrap()
                .insert(service.clone(), socket.as_raw_fd());
            tokio::spawn(self.clone().listen(service.clone(), socket));
        }
        // Descriptors named for an endpoint this image does not serve.
        for fd in inherited.listeners.into_values() {
            drop(adopt_fd(fd));
        }
        let mut resumed = Vec::new();
        for c in inherited.connections {
            let client = std::net::TcpStream::from(adopt_fd(c.client)?);
            let server = std::net::TcpStream::from(adopt_fd(c.server)?);
            resumed.push(Parked {
                service: c.service,
                instance: c.instance,
                client,
                server,
            });
        }
        if !resumed.is_empty() {
            tracing::info!(
                connections = resumed.len(),
                "resumed the client connections handed over by the previous control plane"
            );
        }
        self.resume(resumed);
        Ok(())
    }

    /// Park every forwarded connection and describe the endpoints for the
    /// next image; their descriptors are made inheritable. If the exec then
    /// fails, [`Handover::unpark`] puts everything back.
    pub async fn park(&self) -> (Inherited, usize) {
        self.park.send_replace(true);
        let deadline = Instant::now() + PARK_TIMEOUT;
        while self.live.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let stuck = self.live.load(Ordering::SeqCst);
        let mut inherited = Inherited {
            listeners: self.listeners.lock().unwrap().clone(),
            connections: Vec::new(),
        };
        for fd in inherited.listeners.values() {
            inheritable(*fd, true);
        }
        for p in self.parked.lock().unwrap().iter() {
            inheritable(p.client.as_raw_fd(), true);
            inheritable(p.server.as_raw_fd(), true);
            inherited.connections.push(InheritedConnection {
                service: p.service.clone(),
                instance: p.instance.clone(),
                client: p.client.as_raw_fd(),
                server: p.server.as_raw_fd(),
            });
        }
        (inherited, stuck)
    }

    /// The exec failed: forward again what was parked.
    pub fn unpark(self: &Arc<Self>) {
        for fd in self.listeners.lock().unwrap().values() {
            inheritable(*fd, false);
        }
        let parked = std::mem::take(&mut *self.parked.lock().unwrap());
        for p in &parked {
            inheritable(p.client.as_raw_fd(), false);
            inheritable(p.server.as_raw_fd(), false);
        }
        self.park.send_replace(false);
        self.resume(parked);
    }

    fn resume(self: &Arc<Self>, parked: Vec<Parked>) {
        for p in parked {
            let (Ok(client), Ok(server)) =
                (TcpStream::from_std(p.client), TcpStream::from_std(p.server))
            else {
                continue;
            };
            self.live.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(forward(
                self.handle(),
                p.service,
                p.instance,
                client,
                server,
            ));
        }
    }

    fn handle(self: &Arc<Self>) -> Conn {
        Conn {
            park: self.park.subscribe(),
            routes: self.routes.clone(),
            live: Live(self.clone()),
        }
    }

    fn backends(&self, service: &str) -> Vec<String> {
        self.routes
            .borrow()
            .get(service)
            .cloned()
            .unwrap_or_default()
    }

    /// Accept while the Service has a backend; refuse (not listening) while
    /// it has none; stop accepting, but keep the backlog, while parked.
    async fn listen(self: Arc<Self>, service: String, socket: socket2::Socket) {
        let mut routes = self.routes.clone();
        let mut park = self.park.subscribe();
        let mut listener: Option<TcpListener> = None;
        let next = AtomicUsize::new(0);
        loop {
            let backends = self.backends(&service);
            let parked = *park.borrow_and_update();
            if backends.is_empty() && !parked {
                if listener.take().is_some() || is_listening(&socket) {
                    // Bound but not listening: connections are refused, as
                    // for a Service without endpoints, and the port stays
                    // ours.
                    let _ = socket.shutdown(std::net::Shutdown::Read);
                    tracing::info!(service, "no ready instance: refusing connections");
                }
            } else if listener.is_none() && !backends.is_empty() {
                match listen_on(&socket) {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::error!(service, error = %e, "cannot listen; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let accepting = listener
                .as_ref()
                .filter(|_| !parked && !backends.is_empty());
            tokio::select! {
                r = async { accepting.unwrap().accept().await }, if accepting.is_some() => {
                    let Ok((client, _)) = r else { continue };
                    let pick = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()].clone();
                    let Some((host, port)) = self.addrs.get(&pick).cloned() else { continue };
                    self.live.fetch_add(1, Ordering::SeqCst);
                    let conn = self.handle();
                    let service = service.clone();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect((host.as_str(), port)).await else {
                            drop(conn);
                            return;
                        };
                        forward(conn, service, pick, client, server).await;
                    });
                }
                r = routes.changed() => if r.is_err() { return },
                r = park.changed() => if r.is_err() { return },
            }
        }
    }
}

/// What one forwarded connection needs from its endpoint.
struct Conn {
    park: watch::Receiver<bool>,
    routes: watch::Receiver<RouteTable>,
    live: Live,
}

/// Counted in `live` from accept until the connection ends or parks.
struct Live(Arc<Handover>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Copy bytes both ways until either side ends, the instance leaves the
/// Service, or a handover parks the connection.
async fn forward(
    conn: Conn,
    service: String,
    instance: String,
    client: TcpStream,
    server: TcpStream,
) {
    let Conn {
        park,
        mut routes,
        live,
    } = conn;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let leave = async {
        loop {
            if routes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            let still = routes
                .borrow()
                .get(&service)
                .is_some_and(|b| b.contains(&instance));
            if !still {
                break;
            }
        }
    };
    tokio::select! {
        (up, down) = async { tokio::join!(pump(cr, sw, park.clone()), pump(sr, cw, park.clone())) } => {
            if let (Pumped::Parked(cr, sw), Pumped::Parked(sr, cw)) = (up, down)
                && let (Ok(client), Ok(server)) = (cr.reunite(cw), sr.reunite(sw))
                && let (Ok(client), Ok(server)) = (client.into_std(), server.into_std())
            {
                live.0.parked.lock().unwrap().push(Parked { service, instance, client, server });
            }
        }
        _ = leave => {
            tracing::info!(service, instance, "closing a client connection: the instance left the route");
        }
    }
    drop(live);
}

enum Pumped {
    Ended,
    Parked(OwnedReadHalf, OwnedWriteHalf),
}

/// One direction. Parking happens only while waiting to read (a read not
/// yet done loses nothing), never between a read and its write.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut park: watch::Receiver<bool>,
) -> Pumped {
    let mut buf = vec![0u8; 16 * 1024];
    // The signal's sender lives as long as the endpoints; if it were gone,
    // there would be nothing to park for, and copying simply goes on.
    let mut parkable = true;
    loop {
        if parkable && *park.borrow_and_update() {
            return Pumped::Parked(from, to);
        }
        let n = tokio::select! {
            biased;
            r = park.changed(), if parkable => {
                parkable = r.is_ok();
                continue;
            }
            r = from.read(&mut buf) => r,
        };
        match n {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return Pumped::Ended;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return Pumped::Ended;
                }
            }
        }
    }
}

/// A bound socket for an endpoint, not yet listening.
fn bind(service: &str, host: &str, port: u16) -> anyhow::Result<socket2::Socket> {
    use std::net::ToSocketAddrs;
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host} has no address"))?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.cloexec(),
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into()).map_err(|e| {
        anyhow::anyhow!(
            "cannot listen for the {service} endpoint on {host}:{port}: {e}; choose other ports with --port-base (0 picks free ones) or stop what uses it"
        )
    })?;
    Ok(socket)
}

fn listen_on(socket: &socket2::Socket) -> std::io::Result<TcpListener> {
    socket.listen(1024)?;
    let l: std::net::TcpListener = socket.try_clone()?.into();
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

fn is_listening(socket: &socket2::Socket) -> bool {
    socket.is_listener().unwrap_or(false)
}

/// Take a descriptor the previous image handed on.
fn adopt_fd(fd: RawFd) -> anyhow::Result<socket2::Socket> {
    let socket = socket2::Socket::from(inherit::take(fd, ADOPT_ENDPOINTS_ENV)?);
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn inheritable(fd: RawFd, on: bool) {
    if let Err(e) = inherit::set_inheritable(fd, on) {
        tracing::warn!(fd, error = %e, "cannot change whether a descriptor survives exec");
    }
}

/// The endpoints the previous image of this control plane handed on.
pub fn inherited() -> Option<Inherited> {
    let text = std::env::var(ADOPT_ENDPOINTS_ENV).ok()?;
    match serde_json::from_str(&text) {
        Ok(i) => Some(i),
        Err(e) => {
            tracing::error!(error = %e, "cannot read {ADOPT_ENDPOINTS_ENV}; binding the endpoints anew");
            None
        }
    }
}
