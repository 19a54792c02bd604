//! A private server: mysqld on a data directory of our own, with no network
//! and no grant checks, reached as root on its own socket. Recovery replays
//! binary logs on one; a MySQL base backup starts one on its copy to read
//! the GTID set the copy holds (and to prove it starts).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::*;

use crate::clone_progress::{Tail, tail_lines, tail_text};
use crate::config::InstanceConfig;
use crate::sql;

pub struct PrivateServer {
    child: tokio::process::Child,
    tail: Tail,
    pub conn: Conn,
}

impl PrivateServer {
    /// Start mysqld with `args` (they must name the socket `socket`) and
    /// connect to it.
    pub async fn start(
        cfg: &InstanceConfig,
        args: Vec<String>,
        socket: &Path,
    ) -> anyhow::Result<PrivateServer> {
        let mut cmd = cfg.programs.tokio_command(&cfg.programs.mysqld);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if nix::unistd::geteuid().is_root() {
            cmd.arg("--user=root");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| cfg.programs.start_error(&cfg.programs.mysqld, &e))?;
        let tail = tail_lines(child.stderr.take().expect("piped"), "private mysqld");
        let opts = sql::socket_opts(socket, "root", None);
        let conn = tokio::select! {
            c = sql::wait_connectable(&opts, Duration::from_secs(300)) => c,
            st = child.wait() => Err(anyhow::anyhow!("it exited ({:?})", st.ok())),
        };
        match conn {
            Ok(conn) => Ok(PrivateServer { child, tail, conn }),
            Err(e) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                anyhow::bail!(
                    "a private server could not be started: {e}: {}",
                    tail_text(&tail)
                )
            }
        }
    }

    /// Shut it down cleanly.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.conn.query_drop("SHUTDOWN").await;
        let st = tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await;
        match st {
            Ok(Ok(s)) if s.success() => Ok(()),
            other => {
                let _ = self.child.start_kill();
                anyhow::bail!(
                    "the private server did not stop cleanly ({other:?}): {}",
                    tail_text(&self.tail)
                )
            }
        }
    }

    /// Stop it at once (after a failure).
    pub async fn kill(mut self) -> String {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        tail_text(&self.tail)
    }
}

/// The options of a bare private server on `datadir` (no configuration
/// file, no binary log): enough to open a copy and read its state.
pub fn bare_args(datadir: &Path, socket: &Path, pid: &Path) -> Vec<String> {
    vec![
        "--no-defaults".into(),
        format!("--datadir={}", datadir.display()),
        format!("--socket={}", socket.display()),
        format!("--pid-file={}", pid.display()),
        "--skip-networking".into(),
        "--skip-grant-tables".into(),
        "--disable-log-bin".into(),
        "--server-id=1".into(),
        "--innodb-buffer-pool-size=32M".into(),
        "--mysqlx=OFF".into(),
        "--performance-schema=OFF".into(),
        "--gtid-mode=ON".into(),
        "--enforce-gtid-consistency=ON".into(),
        "--secure-file-priv=NULL".into(),
    ]
}

/// Where a private server's socket and pid file go for `what`.
pub fn paths(cfg: &InstanceConfig, what: &str) -> (PathBuf, PathBuf) {
    (
        cfg.run_dir.join(format!("{what}.sock")),
        cfg.run_dir.join(format!("{what}.pid")),
    )
}
