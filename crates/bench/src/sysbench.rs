//! `sysbench oltp_write_only` as a load (issue 46): Debian's sysbench
//! against `rw`, its tables in the application's database. Each of its
//! transactions updates an indexed and an unindexed column, deletes a row
//! and inserts it again: four row changes over secondary indexes, a load
//! heavier for a replica's applier than the one-row inserts of
//! `cnmysql_workload::load`.
//!
//! The password reaches sysbench in a configuration file only this user
//! can read, never in its arguments.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// Tables and rows per table: small enough to prepare in seconds, enough
/// rows that the threads rarely wait for each other's locks.
const TABLES: u32 = 4;
const TABLE_SIZE: u32 = 20_000;

/// A running `sysbench oltp_write_only`.
pub(crate) struct Sysbench {
    child: Child,
    _conf: tempfile::NamedTempFile,
}

impl Sysbench {
    /// Its tables made again (cleanup, then prepare), then `threads`
    /// connections writing for `seconds` in the background.
    pub(crate) fn start(
        rw: &mysql_async::Opts,
        threads: usize,
        seconds: u64,
    ) -> anyhow::Result<Sysbench> {
        let conf = config(rw)?;
        for step in ["cleanup", "prepare"] {
            let out = sysbench(&conf, &[step])
                .stdout(Stdio::null())
                .output()
                .context("running sysbench (Debian package sysbench; scripts/setup installs it)")?;
            anyhow::ensure!(
                out.status.success(),
                "sysbench {step} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let child = sysbench(
            &conf,
            &[
                &format!("--threads={threads}"),
                &format!("--time={seconds}"),
                "run",
            ],
        )
        .stdout(Stdio::piped())
        .spawn()?;
        Ok(Sysbench { child, _conf: conf })
    }

    /// Wait for the end of its run; its transactions per second.
    pub(crate) fn finish(self, deadline: Duration) -> anyhow::Result<f64> {
        let (tx, rx) = std::sync::mpsc::channel();
        let child = self.child;
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = rx
            .recv_timeout(deadline)
            .context("sysbench did not finish its run in time")??;
        let text = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(out.status.success(), "sysbench run failed:\n{text}");
        transactions_per_second(&text)
            .with_context(|| format!("no transaction rate in sysbench's report:\n{text}"))
    }
}

/// The connection options sysbench reads with `--config-file`: the
/// address, the user and its password, and the workload's shape.
fn config(rw: &mysql_async::Opts) -> anyhow::Result<tempfile::NamedTempFile> {
    let mut f = tempfile::NamedTempFile::new()?; // created 0600
    writeln!(
        f,
        "mysql-host={}\nmysql-port={}\nmysql-user={}\nmysql-password={}\nmysql-db=app\ntables={TABLES}\ntable-size={TABLE_SIZE}",
        rw.ip_or_hostname(),
        rw.tcp_port(),
        rw.user().unwrap_or_default(),
        rw.pass().unwrap_or_default(),
    )?;
    f.flush()?;
    Ok(f)
}

fn sysbench(conf: &tempfile::NamedTempFile, args: &[&str]) -> Command {
    let mut c = Command::new("sysbench");
    c.arg(format!("--config-file={}", conf.path().display()))
        .arg("oltp_write_only")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// From sysbench's report: `transactions: 12345 (617.10 per sec.)`.
fn transactions_per_second(report: &str) -> Option<f64> {
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with("transactions:"))?;
    let (_, rate) = line.split_once('(')?;
    rate.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_off_the_report() {
        let report = "SQL statistics:\n    queries performed:\n        write:  49368\n    transactions:                        12342  (616.85 per sec.)\n    queries:                             74052  (3701.13 per sec.)\n";
        assert_eq!(transactions_per_second(report), Some(616.85));
        assert_eq!(transactions_per_second("nothing here"), None);
    }
}
