//! The in-place re-exec of a new executable with mysqld kept running: it
//! owns what is handed on to the next image (the log FIFO's descriptor,
//! the listening sockets) and the one re-exec that may be under way. The
//! control API asks for it (`backend.rs`); the manager's start records
//! what is handed on.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::mysqld::{ServerState, Supervisor};

pub(super) struct Reexec {
    /// The manager's own binary (its private copy): what an in-place
    /// upgrade replaces.
    pub exe_path: PathBuf,
    /// The log FIFO's descriptor, handed on across a re-exec.
    log_fd: Mutex<Option<RawFd>>,
    /// The listening sockets (control API, probes), handed on so that
    /// nobody is refused during it.
    listen_fds: Mutex<Vec<(&'static str, RawFd)>>,
    /// A re-exec is scheduled: no second one meanwhile.
    pending: AtomicBool,
    /// Holds the control API still just before a re-exec.
    gate: Arc<crate::serve::Gate>,
}

impl Reexec {
    pub fn new(exe_path: PathBuf, gate: Arc<crate::serve::Gate>) -> Self {
        Reexec {
            exe_path,
            log_fd: Mutex::new(None),
            listen_fds: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            gate,
        }
    }

    pub fn set_log_fd(&self, fd: RawFd) {
        *self.log_fd.lock().unwrap() = Some(fd);
    }

    pub fn add_listener(&self, name: &'static str, fd: RawFd) {
        self.listen_fds.lock().unwrap().push((name, fd));
    }

    /// A re-exec is scheduled.
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Re-exec `exe` once `answered` (the reply to the request) is sent,
    /// handing on mysqld, the log FIFO and the listeners; at most one at a
    /// time. On failure this image goes on, the previous executable put
    /// back when it was an upgrade.
    pub fn start(
        self: Arc<Self>,
        supervisor: Arc<Supervisor>,
        exe: PathBuf,
        upgraded: bool,
        answered: tokio::sync::oneshot::Receiver<()>,
    ) {
        if self.pending.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            // The answer is written (or the caller left, or it took too
            // long); a moment more for the TLS layer to flush it.
            let _ = tokio::time::timeout(crate::upgrade::ANSWER_TIMEOUT, answered).await;
            tokio::time::sleep(crate::upgrade::FLUSH_GRACE).await;
            let mysqld = match supervisor.state() {
                ServerState::Running { pid } => Some(pid),
                _ => None,
            };
            let Some(fd) = *self.log_fd.lock().unwrap() else {
                tracing::error!("cannot re-exec: the log FIFO is not open");
                self.pending.store(false, Ordering::SeqCst);
                return;
            };
            // Requests already being served finish first; new ones wait in
            // the backlog for the next image.
            let open = self.gate.quiesce(crate::upgrade::QUIESCE_TIMEOUT).await;
            if open > 0 {
                tracing::warn!(open, "re-executing with control API connections still open");
            }
            let listeners = self.listen_fds.lock().unwrap().clone();
            let e = crate::upgrade::reexec(&exe, mysqld, fd, &listeners);
            self.gate.release();
            tracing::error!(error = %e, "re-exec failed; this manager goes on supervising mysqld");
            if upgraded {
                crate::upgrade::restore_previous(&exe);
            }
            self.pending.store(false, Ordering::SeqCst);
        });
    }
}
