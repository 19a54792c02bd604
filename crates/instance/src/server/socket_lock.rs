//! MySQL's lock file beside its Unix socket (`mysqld.sock.lock`): the pid
//! of the server that made the socket. A starting server refuses the
//! socket ("Another process with pid N is using unix socket file", then
//! aborts) while anything answers to that number, and in a container
//! restarted after its PID 1 was killed the old server's pid is often a
//! *thread* of the new server (a fresh PID namespace hands out the same
//! small numbers): the first start then fails after its whole crash
//! recovery and a second one is needed (measured on the real node: 2.6 s
//! of a 4.6 s outage). MariaDB keeps no such file.
//!
//! The supervisor starts a server only when none of this instance runs
//! (its own child has exited; a leftover of an earlier manager was stopped
//! first, `mysqld::stop_leftover`), so a lock file is stale then unless the
//! pid it names is a live server process: it is removed, and kept in that
//! one case (the server will say why it refuses).

use std::path::{Path, PathBuf};

/// The lock file MySQL keeps beside `socket`.
pub fn lock_file(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Remove a stale lock file beside `socket`; true when one was removed.
pub fn clear_stale(socket: &Path) -> bool {
    let lock = lock_file(socket);
    let Ok(text) = std::fs::read_to_string(&lock) else {
        return false;
    };
    if let Ok(pid) = text.trim().parse::<u32>()
        && is_server_process(pid)
    {
        return false;
    }
    match std::fs::remove_file(&lock) {
        Ok(()) => {
            tracing::info!(lock = %lock.display(), pid = text.trim(), "removed a stale socket lock file");
            true
        }
        Err(_) => false,
    }
}

/// `pid` is a running process (not a thread of another) of a database
/// server.
fn is_server_process(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let leader = field("Tgid:") == pid.to_string();
    let running = !field("State:").starts_with('Z');
    let server = matches!(field("Name:").as_str(), "mysqld" | "mariadbd");
    leader && running && server
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket_with_lock(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("mysqld.sock");
        std::fs::write(lock_file(&socket), text).unwrap();
        (dir, socket)
    }

    #[test]
    fn a_lock_naming_a_thread_or_a_gone_process_is_removed() {
        // A thread of this test process: answers to its number, is no
        // process of its own (what a restarted container's server meets).
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            std::thread::park();
        });
        let tid = rx.recv().unwrap();
        let (_d, socket) = socket_with_lock(&format!("{tid}\n"));
        assert!(clear_stale(&socket));
        assert!(!lock_file(&socket).exists());
        t.thread().unpark();
        t.join().unwrap();

        let (_d, socket) = socket_with_lock("4194303\n");
        assert!(clear_stale(&socket), "a pid nobody has");
        let (_d, socket) = socket_with_lock("not a pid");
        assert!(clear_stale(&socket));
    }

    #[test]
    fn a_lock_of_a_running_server_is_kept() {
        // A process named as the server is: sleep run through a link
        // called mysqld (a link, not a copy: a copy's file may still be
        // open for writing in a child another test forks, and then fails
        // to run with "text file busy").
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("mysqld");
        std::os::unix::fs::symlink("/bin/sleep", &fake).unwrap();
        let mut child = std::process::Command::new(&fake).arg("30").spawn().unwrap();
        // Until its exec is seen, the child bears this test's name.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !is_server_process(child.id()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the stand-in server never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (_d, socket) = socket_with_lock(&child.id().to_string());
        assert!(!clear_stale(&socket));
        assert!(lock_file(&socket).exists());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_lock_of_a_live_process_that_is_no_server_is_removed_and_none_is_no_error() {
        let (_d, socket) = socket_with_lock(&std::process::id().to_string());
        assert!(clear_stale(&socket), "the test process is no mysqld");
        let dir = tempfile::tempdir().unwrap();
        assert!(!clear_stale(&dir.path().join("mysqld.sock")));
    }
}
