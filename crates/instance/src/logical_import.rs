//! A logical import: the flavour's dump client reads a consistent snapshot
//! of the source's user databases over TLS, and its output is loaded into a
//! private server through the command-line client, never written to the
//! binary log. The dump names the source's GTID position at the snapshot
//! (MariaDB `gtid_slave_pos`, MySQL `GTID_PURGED`); it is read from the
//! stream as it passes, so the new server's history can be set to it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::clone_progress::{ProgressCell, report, tail_lines, tail_text};
use crate::config::InstanceConfig;
use crate::source_account::SourceAccount;

/// Where and how the dump reaches the source.
pub struct Source<'a> {
    pub host: &'a str,
    pub port: u16,
    /// The name its certificate was checked for.
    pub name: &'a str,
    pub account: &'a SourceAccount,
}

/// What a load brought.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The source's GTID position at the snapshot, as the dump gave it.
    pub gtid: String,
    pub bytes: u64,
}

/// A `[client]` option file with `password` (never on a command line),
/// readable by its owner only.
fn option_file(path: &Path, password: &str) -> anyhow::Result<PathBuf> {
    let escaped = password.replace('\\', "\\\\").replace('"', "\\\"");
    cnmysql_tls::write_private(path, &format!("[client]\npassword=\"{escaped}\"\n"), true)?;
    Ok(path.to_path_buf())
}

/// The dump client's arguments after its option file.
fn dump_args(f: Flavor, src: &Source, databases: &[String]) -> Vec<String> {
    let a = src.account;
    let mut args = vec![
        format!("--host={}", src.host),
        format!("--port={}", src.port),
        format!("--user={}", a.user),
        "--protocol=TCP".into(),
        format!("--ssl-ca={}", a.ca.display()),
        "--single-transaction".into(),
        "--quick".into(),
        "--routines".into(),
        "--events".into(),
        "--triggers".into(),
        "--hex-blob".into(),
        "--no-tablespaces".into(),
        "--max-allowed-packet=1G".into(),
    ];
    if let Some((cert, key)) = &a.client {
        args.push(format!("--ssl-cert={}", cert.display()));
        args.push(format!("--ssl-key={}", key.display()));
    }
    // The name was checked against the CA by our own connection first; the
    // clients can check no name but the host they connect to.
    let named = src.name == src.host;
    match f {
        Flavor::Mariadb => {
            args.push("--ssl".into());
            if named {
                args.push("--ssl-verify-server-cert".into());
            }
            // The GTID position of the snapshot, as a comment.
            args.extend(["--gtid".into(), "--master-data=2".into()]);
        }
        Flavor::Mysql => {
            let mode = if named {
                "VERIFY_IDENTITY"
            } else {
                "VERIFY_CA"
            };
            args.push(format!("--ssl-mode={mode}"));
            args.extend([
                "--set-gtid-purged=ON".into(),
                "--source-data=2".into(),
                "--column-statistics=0".into(),
            ]);
        }
    }
    args.push("--databases".into());
    args.extend(databases.iter().cloned());
    args
}

/// The GTID position the start of a dump states, once the whole
/// statement is there (MySQL breaks a long set over lines).
fn gtid_in(f: Flavor, head: &str) -> Option<String> {
    let marker = match f {
        Flavor::Mariadb => "gtid_slave_pos=",
        Flavor::Mysql => "GTID_PURGED=",
    };
    let rest = &head[head.find(marker)? + marker.len()..];
    let statement = &rest[..rest.find("';")? + 1];
    // MySQL writes `/*!80000 '+'*/ 'set'`: the last quoted part.
    let quoted: Vec<&str> = statement.split('\'').collect();
    let set = quoted.iter().rev().nth(1)?;
    Some(set.replace(['\n', ' '], ""))
}

/// Dump `databases` of `src` into the private server on `socket` (which
/// runs without grant checks); progress goes to `progress`.
pub async fn load(
    cfg: &InstanceConfig,
    src: &Source<'_>,
    databases: &[String],
    socket: &Path,
    progress: &ProgressCell,
) -> anyhow::Result<Loaded> {
    let f = cfg.flavor();
    let programs = &cfg.programs;
    let (dump_path, client_path) = match (&programs.dump, &programs.client) {
        (Some(d), Some(c)) => (d, c),
        _ => anyhow::bail!(
            "spec.bootstrap.import: a logical import needs the server's dump client and command-line client, and this server has {} and {}",
            programs
                .dump
                .as_deref()
                .map_or("no dump client".into(), |p| p.display().to_string()),
            programs
                .client
                .as_deref()
                .map_or("no client".into(), |p| p.display().to_string()),
        ),
    };
    let options = option_file(
        &cfg.run_dir.join("import-source.cnf"),
        &src.account.password,
    )?;
    let mut dump = programs.tokio_command(dump_path);
    dump.arg(format!("--defaults-extra-file={}", options.display()))
        .args(dump_args(f, src, databases))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut dump = dump
        .spawn()
        .map_err(|e| programs.start_error(dump_path, &e))?;
    let mut client = programs.tokio_command(client_path);
    client
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["--user=root", "--binary-mode", "--max-allowed-packet=1G"])
        .arg("--init-command=SET SESSION sql_log_bin = 0")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut client = client
        .spawn()
        .map_err(|e| programs.start_error(client_path, &e))?;
    let dump_tail = tail_lines(dump.stderr.take().expect("piped"), "dump");
    let client_tail = tail_lines(client.stderr.take().expect("piped"), "client");
    let mut out = dump.stdout.take().expect("piped");
    let mut into = client.stdin.take().expect("piped");
    let started = Instant::now();
    let mut loaded = Loaded::default();
    let mut head = String::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut logged = Instant::now();
    let copied: anyhow::Result<()> = async {
        loop {
            let n = out.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            // The position is stated near the top of the dump.
            if loaded.gtid.is_empty() && head.len() < 1 << 20 {
                head.push_str(&String::from_utf8_lossy(&buf[..n]));
                if let Some(g) = gtid_in(f, &head) {
                    loaded.gtid = g;
                }
            }
            into.write_all(&buf[..n]).await?;
            loaded.bytes += n as u64;
            report(progress, src.host, started, "loading", loaded.bytes, None);
            if logged.elapsed() >= Duration::from_secs(5) {
                logged = Instant::now();
                tracing::info!(
                    source = src.host,
                    bytes = loaded.bytes,
                    "import: loading the dump"
                );
            }
        }
        into.shutdown().await?;
        Ok(())
    }
    .await;
    drop(into);
    let dumped = dump.wait().await?;
    let applied = client.wait().await?;
    std::fs::remove_file(&options).ok();
    anyhow::ensure!(
        dumped.success(),
        "the dump of {} failed ({dumped}): {}",
        src.host,
        tail_text(&dump_tail)
    );
    anyhow::ensure!(
        applied.success(),
        "loading the dump failed ({applied}): {}",
        tail_text(&client_tail)
    );
    copied?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_is_read_from_either_flavours_dump() {
        assert_eq!(
            gtid_in(
                Flavor::Mariadb,
                "-- SET GLOBAL gtid_slave_pos='0-101-42,7-9-1';"
            )
            .as_deref(),
            Some("0-101-42,7-9-1")
        );
        assert_eq!(
            gtid_in(
                Flavor::Mysql,
                "SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5';"
            )
            .as_deref(),
            Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
        );
        assert_eq!(
            gtid_in(
                Flavor::Mysql,
                "SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'a:1-5,\nb:1-3';\n"
            )
            .as_deref(),
            Some("a:1-5,b:1-3")
        );
        // Not all there yet.
        assert_eq!(
            gtid_in(
                Flavor::Mysql,
                "SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'a:1-5,"
            ),
            None
        );
        assert_eq!(gtid_in(Flavor::Mysql, "CREATE TABLE t (i INT);"), None);
    }
}
