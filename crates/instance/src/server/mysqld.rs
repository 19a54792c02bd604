//! Supervising the mysqld process: start it with its output going through a
//! FIFO the manager holds open, forward each line as a structured log record,
//! restart it when it dies, and stop it cleanly within a bounded time.
//!
//! The FIFO is opened read-write by the manager, so a reader always exists:
//! mysqld never gets SIGPIPE, and a later re-exec of the manager can inherit
//! the descriptor and keep reading (DESIGN §8).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, watch};

use crate::config::InstanceConfig;

/// What the supervisor knows of mysqld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Stopped,
    Running {
        pid: u32,
    },
    /// It died and will be started again after a pause.
    Restarting,
}

pub struct Supervisor {
    cfg: Arc<InstanceConfig>,
    /// Options for the next start, beyond the rendered my.cnf.
    start_options: std::sync::Mutex<Vec<String>>,
    state_tx: watch::Sender<ServerState>,
    stop: Arc<Notify>,
    stopping: watch::Sender<bool>,
    /// Whether a supervision loop exists (from [`Supervisor::start`] until
    /// the loop has ended and its mysqld, if any, has exited). Not the same
    /// as `state == Stopped`: a loop that was just started has not run yet.
    active: watch::Sender<bool>,
    /// A running mysqld handed on by the previous image of a re-exec'd
    /// manager: supervised instead of starting one.
    adopted: std::sync::Mutex<Option<u32>>,
    /// Whether the last mysqld stopped by this supervisor exited with
    /// status 0 after SIGTERM: a clean shutdown, both logs written out.
    clean_stop: std::sync::atomic::AtomicBool,
}

/// Forwards mysqld's output from the FIFO to the structured log.
pub struct LogForwarder {
    drain: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
    last_line: Arc<std::sync::Mutex<Instant>>,
    fd: std::os::fd::RawFd,
}

impl LogForwarder {
    /// The FIFO's descriptor, handed to the next image on a re-exec.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }

    /// When mysqld last wrote a line: a starting server that is silent and
    /// not accepting connections is making no progress.
    pub fn last_output(&self) -> Arc<std::sync::Mutex<Instant>> {
        self.last_line.clone()
    }

    /// Forward what mysqld already wrote (its last words on shutdown) before
    /// the manager exits: read until the pipe stays quiet for 50 ms.
    pub async fn drain(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.drain.send(tx).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
        }
    }
}

/// Open (creating if needed) the log FIFO read-write and forward its lines;
/// or, after a re-exec, keep reading the descriptor the previous image
/// handed on (lines mysqld wrote meanwhile are still in the pipe).
pub fn start_log_forwarder(
    path: &Path,
    inherited: Option<std::os::fd::OwnedFd>,
) -> anyhow::Result<LogForwarder> {
    use std::os::fd::AsRawFd;
    let rx = match inherited {
        Some(fd) => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?,
        None => {
            if !path.exists() {
                nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))?;
            }
            tokio::net::unix::pipe::OpenOptions::new()
                .read_write(true)
                .open_receiver(path)?
        }
    };
    let fd = rx.as_raw_fd();
    let (drain_tx, mut drain_rx) =
        tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>(1);
    let last_line = Arc::new(std::sync::Mutex::new(Instant::now()));
    let last = last_line.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(rx).lines();
        loop {
            tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(line)) => {
                        *last.lock().unwrap() = Instant::now();
                        forward_line(&line)
                    }
                    _ => break,
                },
                Some(done) = drain_rx.recv() => {
                    while let Ok(Ok(Some(line))) = tokio::time::timeout(Duration::from_millis(50), lines.next_line()).await {
                        forward_line(&line);
                    }
                    let _ = done.send(());
                }
            }
        }
    });
    Ok(LogForwarder {
        drain: drain_tx,
        last_line,
        fd,
    })
}

/// One mysqld log line as a structured record, at the level mysqld gave it.
fn forward_line(line: &str) {
    let line = line.trim_end();
    if line.is_empty() {
        return;
    }
    if line.contains("[ERROR]") {
        tracing::error!(target: "mysqld", source = "mysqld", "{line}");
    } else if line.contains("[Warning]") {
        tracing::warn!(target: "mysqld", source = "mysqld", "{line}");
    } else {
        tracing::info!(target: "mysqld", source = "mysqld", "{line}");
    }
}

/// Is this process alive (and not a zombie)?
pub fn is_alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
}

/// Stop a mysqld left behind by an earlier manager of this instance (for
/// example one killed with SIGKILL): two servers must never share a data
/// directory.
pub async fn stop_leftover(cfg: &InstanceConfig) {
    let Ok(text) = std::fs::read_to_string(cfg.pid_file()) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return;
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let ours = String::from_utf8_lossy(&cmdline).contains(&cfg.mycnf().display().to_string());
    if !ours || !is_alive(pid) {
        return;
    }
    tracing::warn!(
        pid,
        "a mysqld from an earlier manager is still running; stopping it"
    );
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(cfg.shutdown_timeout_secs);
    while is_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if is_alive(pid) {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        while is_alive(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Supervisor {
    pub fn new(cfg: Arc<InstanceConfig>) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            cfg,
            start_options: Default::default(),
            state_tx: watch::channel(ServerState::Stopped).0,
            stop: Arc::new(Notify::new()),
            stopping: watch::channel(false).0,
            active: watch::channel(false).0,
            clean_stop: Default::default(),
            adopted: Default::default(),
        })
    }

    /// Supervise this running mysqld (our child, from before a re-exec)
    /// instead of starting one.
    pub fn adopt(&self, pid: u32) {
        *self.adopted.lock().unwrap() = Some(pid);
    }

    pub fn state(&self) -> ServerState {
        *self.state_tx.borrow()
    }

    /// Options for every later start of mysqld (until changed).
    pub fn set_start_options(&self, options: Vec<String>) {
        let mut cur = self.start_options.lock().unwrap();
        if *cur != options {
            tracing::info!(options = ?options, "mysqld start options changed");
            *cur = options;
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<ServerState> {
        self.state_tx.subscribe()
    }

    fn spawn_mysqld(&self) -> anyhow::Result<u32> {
        let fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(self.cfg.log_fifo())?;
        let programs = &self.cfg.programs;
        let mut cmd = programs.command(&programs.mysqld);
        cmd.arg(format!("--defaults-file={}", self.cfg.mycnf().display()));
        if nix::unistd::geteuid().is_root() {
            cmd.arg("--user=root");
        }
        let options = self.start_options.lock().unwrap().clone();
        if !options.is_empty() {
            tracing::info!(options = ?options, "starting mysqld with recovery options");
        }
        cmd.args(options);
        // No server of this instance runs now: a socket lock file left by
        // one that did would make this one abort (`socket_lock.rs`).
        super::socket_lock::clear_stale(&self.cfg.socket());
        cmd.stdin(Stdio::null())
            .stdout(fifo.try_clone()?)
            .stderr(fifo)
            // Its own process group: a Ctrl-C in the terminal reaches the
            // manager, which then shuts the server down in order.
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| programs.start_error(&programs.mysqld, &e))?;
        Ok(child.id())
    }

    /// Start supervising mysqld (once: a second call while a loop exists
    /// does nothing, and none starts after [`Supervisor::shutdown`]).
    pub fn start(self: &Arc<Self>) {
        if *self.stopping.borrow() {
            return;
        }
        // Marked active before the loop looks at `stopping`, and shutdown
        // marks `stopping` before it looks at `active`: either the loop sees
        // the shutdown and starts nothing, or shutdown waits for the loop.
        let started = self
            .active
            .send_if_modified(|a| !std::mem::replace(a, true));
        if started {
            let me = self.clone();
            tokio::spawn(async move {
                me.run().await;
                me.active.send_replace(false);
            });
        }
    }

    /// Whether a supervision loop exists.
    pub fn is_active(&self) -> bool {
        *self.active.borrow()
    }

    /// Run mysqld until [`Supervisor::shutdown`] is called, restarting it
    /// whenever it exits on its own.
    async fn run(&self) {
        let mut backoff = Duration::from_millis(500);
        loop {
            if *self.stopping.borrow() {
                break;
            }
            let adopted = self.adopted.lock().unwrap().take();
            let pid = match adopted.map(Ok).unwrap_or_else(|| self.spawn_mysqld()) {
                Ok(pid) => pid,
                Err(e) => {
                    tracing::error!(error = %e, "mysqld did not start");
                    self.state_tx.send_replace(ServerState::Restarting);
                    if self.pause(backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    continue;
                }
            };
            if adopted.is_some() {
                tracing::info!(pid, "supervising the adopted mysqld");
            } else {
                tracing::info!(pid, "mysqld started");
            }
            let started = Instant::now();
            // Only a stop of this server can be clean from now on.
            self.clean_stop
                .store(false, std::sync::atomic::Ordering::SeqCst);
            self.state_tx.send_replace(ServerState::Running { pid });
            let waiter = tokio::task::spawn_blocking(move || {
                nix::sys::wait::waitpid(Pid::from_raw(pid as i32), None)
            });
            tokio::pin!(waiter);
            let exited = tokio::select! {
                r = &mut waiter => Some(r),
                _ = self.stop.notified() => None,
            };
            let status = match exited {
                Some(r) => r,
                None => {
                    self.terminate(pid, &mut waiter).await;
                    break;
                }
            };
            self.state_tx.send_replace(ServerState::Restarting);
            let how = match status {
                Ok(Ok(s)) => format!("{s:?}"),
                other => format!("{other:?}"),
            };
            if *self.stopping.borrow() {
                tracing::info!(how, "mysqld exited during shutdown");
                break;
            }
            tracing::warn!(how, "mysqld exited unexpectedly; restarting it");
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(500);
            }
            if self.pause(backoff).await {
                break;
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
        self.state_tx.send_replace(ServerState::Stopped);
    }

    /// Sleep, unless shutdown comes first (then true).
    async fn pause(&self, d: Duration) -> bool {
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(d) => *self.stopping.borrow(),
            _ = crate::stopped(&mut stopping) => true,
        }
    }

    async fn terminate(&self, pid: u32, waiter: &mut Waiter<'_>) {
        let begun = Instant::now();
        let timeout = Duration::from_secs(self.cfg.shutdown_timeout_secs);
        // MariaDB 10.11 hangs for good in init_slave() when SIGTERM arrives
        // during start-up (seen: the signal thread exits, the slave
        // background thread never reports in). So a server still starting
        // is allowed to finish first: it is stopped once it greets clients
        // on its socket, or killed if it neither greets nor exits in time
        // (InnoDB recovers from that like from any crash).
        if !greets(&self.cfg.socket()).await {
            tracing::info!(
                pid,
                "mysqld is still starting; stopping it once it accepts connections"
            );
            let ready = async {
                while !greets(&self.cfg.socket()).await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(timeout, ready) => {}
                _ = &mut *waiter => {
                    tracing::info!(pid, "mysqld exited while starting");
                    return;
                }
            }
        }
        tracing::info!(pid, "stopping mysqld");
        let sig = if greets(&self.cfg.socket()).await {
            Signal::SIGTERM
        } else {
            tracing::error!(
                pid,
                threads = %thread_waits(pid),
                "mysqld did not finish starting in time; killing it"
            );
            Signal::SIGKILL
        };
        let _ = kill(Pid::from_raw(pid as i32), sig);
        let exited = wait_saying_why(pid, timeout, waiter).await;
        let clean = sig == Signal::SIGTERM
            && matches!(exited, Ok(Ok(Ok(nix::sys::wait::WaitStatus::Exited(_, 0)))));
        self.clean_stop
            .store(clean, std::sync::atomic::Ordering::SeqCst);
        if exited.is_err() {
            tracing::error!(
                pid,
                timeout_secs = timeout.as_secs(),
                "mysqld did not stop in time; killing it"
            );
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = (&mut *waiter).await;
        }
        tracing::info!(
            pid,
            millis = begun.elapsed().as_millis() as u64,
            "mysqld stopped"
        );
    }

    /// Kill a mysqld that is hung (for example stuck in start-up); the
    /// supervision loop starts a new one.
    pub fn kill_hung(&self) {
        if let ServerState::Running { pid } = self.state() {
            tracing::error!(
                pid,
                threads = %thread_waits(pid),
                "mysqld is hung; killing it so that it is started again"
            );
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }

    /// Kill mysqld at once to stop it accepting writes (self_fence.rs); it
    /// is started again unless `stop` (the manager is shutting down).
    pub fn kill_to_fence(&self, stop: bool) {
        if stop {
            self.stopping.send_replace(true);
        }
        if let ServerState::Running { pid } = self.state() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }

    /// Stop mysqld cleanly (bounded by the shutdown timeout) and leave it
    /// stopped until the next [`Supervisor::start`]: its data directory is
    /// about to be replaced.
    pub async fn stop_for_now(&self) {
        self.shutdown().await;
        self.stopping.send_replace(false);
    }

    /// Whether the last mysqld this supervisor stopped shut down cleanly
    /// (exit status 0 after SIGTERM).
    pub fn stopped_cleanly(&self) -> bool {
        self.clean_stop.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stop mysqld cleanly (bounded by the shutdown timeout) and do not restart it.
    pub async fn shutdown(&self) {
        self.stopping.send_replace(true);
        self.stop.notify_one();
        let mut active = self.active.subscribe();
        let _ = active.wait_for(|a| !*a).await;
    }
}

/// Whether the server at `socket` sends its handshake greeting: it does so
/// only from its accept loop, once start-up is complete (a bare connect
/// succeeds earlier, as soon as the socket listens).
async fn greets(socket: &Path) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(Ok(mut s)) = tokio::time::timeout(
        Duration::from_millis(200),
        tokio::net::UnixStream::connect(socket),
    )
    .await
    else {
        return false;
    };
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(300), s.read(&mut b)).await,
        Ok(Ok(1))
    )
}

/// What each thread of a process waits on, from /proc: `name:state:wchan`
/// per thread, for the log line of a hung server (a full pipe shows as
/// `pipe_write`, a lock or condition variable as `futex_wait_queue`).
/// The task that reaps mysqld, and what it gives back.
type Waiter<'a> =
    std::pin::Pin<&'a mut tokio::task::JoinHandle<nix::Result<nix::sys::wait::WaitStatus>>>;
type Reaped = Result<nix::Result<nix::sys::wait::WaitStatus>, tokio::task::JoinError>;

/// Wait up to `timeout` for mysqld to exit, saying every 15 s that it has
/// not yet and where its threads wait (its own log says which step of its
/// shutdown it is at).
async fn wait_saying_why(
    pid: u32,
    timeout: Duration,
    waiter: &mut Waiter<'_>,
) -> Result<Reaped, tokio::time::error::Elapsed> {
    let deadline = tokio::time::Instant::now() + timeout;
    let every = Duration::from_secs(15);
    loop {
        let next = (tokio::time::Instant::now() + every).min(deadline);
        match tokio::time::timeout_at(next, &mut *waiter).await {
            Ok(exited) => return Ok(exited),
            Err(elapsed) if next >= deadline => return Err(elapsed),
            Err(_) => tracing::warn!(
                pid,
                threads = %thread_waits(pid),
                "mysqld is still stopping"
            ),
        }
    }
}

fn thread_waits(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let base = t.path();
        let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        out.push(format!(
            "{}:{}:{}",
            read("comm").trim(),
            state,
            read("wchan").trim()
        ));
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in server that never accepts connections, with no shutdown
    /// timeout: the supervisor kills it at once when stopping.
    fn silent_server(dir: &Path) -> Arc<InstanceConfig> {
        let mut cfg = crate::config::tests::sample(dir);
        std::fs::create_dir_all(&cfg.run_dir).unwrap();
        let script = dir.join("mysqld");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        cfg.programs.mysqld = script;
        cfg.shutdown_timeout_secs = 0;
        Arc::new(cfg)
    }

    /// A SIGTERM that reaches the manager just as it starts the server
    /// (seen when a former primary is restarted while the cluster is being
    /// stopped): shutdown must not return while a loop that was started can
    /// still start a server, and nothing starts after it. Every order of
    /// the race is tried, on two worker threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_right_after_start_leaves_no_server_running() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = silent_server(dir.path());
        let _logs = start_log_forwarder(&cfg.log_fifo(), None).unwrap();
        let mut started = std::collections::BTreeSet::new();
        for round in 0..200 {
            let sup = Supervisor::new(cfg.clone());
            let mut states = sup.subscribe();
            let seen = tokio::spawn(async move {
                let mut pids = Vec::new();
                while states.changed().await.is_ok() {
                    if let ServerState::Running { pid } = *states.borrow_and_update() {
                        pids.push(pid);
                    }
                }
                pids
            });
            sup.start();
            // Shut down from 0 to 0.4 ms after the start, while the loop
            // runs on the other worker: before it looked, while it spawns
            // the server, after the server runs.
            std::thread::sleep(Duration::from_micros(round * 2));
            sup.shutdown().await;
            assert!(!sup.is_active(), "a supervision loop outlived shutdown");
            assert_eq!(sup.state(), ServerState::Stopped);
            // Nothing starts after shutdown.
            sup.start();
            assert!(!sup.is_active());
            drop(sup);
            for pid in seen.await.unwrap() {
                assert!(
                    !is_alive(pid),
                    "round {round}: server {pid} survived shutdown"
                );
                started.insert(pid);
            }
        }
        eprintln!("{} of 200 rounds started a server", started.len());
    }
}
