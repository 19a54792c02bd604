//! A logical import: the flavour's dump client reads a consistent snapshot
//! of the source's user databases over TLS, and its output is loaded into a
//! private server through the command-line client, never written to the
//! binary log. The dump names the source's GTID position at the snapshot
//! (MariaDB `gtid_slave_pos`, MySQL `GTID_PURGED`, both as comments); it is
//! read from the stream as it passes, so the new server's history can be
//! set to it.
//!
//! The dump is the source's words, and a hostile source can make it say
//! anything (a table definition is text the source returns). So it is
//! loaded as an account that may only make and fill the databases being
//! imported, and name their definers: no other database (not `mysql`), no
//! global setting, no file, no replication, no account. The client reads
//! no local file and runs no client command, and names from the source are
//! never taken for options of the dump program.

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

/// The account a dump is loaded as, on the private server only.
pub const LOADER_USER: &str = "cnmysql_loader";

/// The loader's account on the private server: every privilege on the
/// databases being imported, and leave to name other definers, nothing
/// else (`databases` are checked names, `database_problem`).
pub fn loader_account(
    f: Flavor,
    databases: &[String],
    password: &str,
) -> Vec<cnmysql_core::flavor::Sql> {
    use cnmysql_core::flavor::{Sql, quote};
    let who = format!("{}@'localhost'", quote(LOADER_USER));
    let create = |pw: &str| format!("CREATE USER {who} IDENTIFIED BY {pw}");
    let mut out = vec![Sql::secret(
        create(&quote(password)),
        create("'<redacted>'"),
    )];
    for d in databases {
        let literal = cnmysql_api::sql_privileges::grant_database_literal(d);
        out.push(Sql::new(format!(
            "GRANT ALL PRIVILEGES ON `{}`.* TO {who}",
            literal.replace('`', "``")
        )));
    }
    let definers = match f {
        Flavor::Mariadb => "SET USER",
        // The dump turns its session's binary log off (restricted session
        // settings, never global ones); the history the session could
        // write is reset after the load. SYSTEM_USER: a definer that is
        // one (root) may only be named by one.
        Flavor::Mysql => {
            "SET_ANY_DEFINER, ALLOW_NONEXISTENT_DEFINER, SESSION_VARIABLES_ADMIN, SYSTEM_USER"
        }
    };
    out.push(Sql::new(format!("GRANT {definers} ON *.* TO {who}")));
    out
}

/// What a load brought.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The source's GTID position at the snapshot, as the dump gave it.
    pub gtid: String,
    pub bytes: u64,
    /// The accounts the loaded routines, views, triggers and events run
    /// as (their definers), for whoever reviews what was trusted.
    pub definers: Vec<String>,
}

/// The definers of every routine, view, trigger and event of `databases`.
pub async fn definers(
    conn: &mut mysql_async::Conn,
    databases: &[String],
) -> anyhow::Result<Vec<String>> {
    use mysql_async::prelude::*;
    if databases.is_empty() {
        return Ok(Vec::new());
    }
    let list = databases
        .iter()
        .map(|d| cnmysql_core::flavor::quote(d))
        .collect::<Vec<_>>()
        .join(", ");
    let q = format!(
        "SELECT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN ({list}) \
         UNION SELECT DEFINER FROM information_schema.VIEWS WHERE TABLE_SCHEMA IN ({list}) \
         UNION SELECT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ({list}) \
         UNION SELECT DEFINER FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN ({list})"
    );
    let mut v: Vec<String> = conn.query(q).await?;
    v.sort();
    v.dedup();
    Ok(v)
}

/// A `[client]` option file with `password` (never on a command line),
/// readable by its owner only.
fn option_file(path: &Path, password: &str) -> anyhow::Result<PathBuf> {
    let escaped = password.replace('\\', "\\\\").replace('"', "\\\"");
    cnmysql_tls::write_private(path, &format!("[client]\npassword=\"{escaped}\"\n"), true)?;
    Ok(path.to_path_buf())
}

/// The loader's `[client]` options: its account on the private server's
/// socket, readable by its owner only.
fn loader_option_file(path: &Path, socket: &Path, password: &str) -> anyhow::Result<PathBuf> {
    use crate::config::option_value;
    let text = format!(
        "[client]\nuser = {LOADER_USER}\npassword = {}\nsocket = {}\n",
        option_value(password),
        option_value(&socket.display().to_string())
    );
    cnmysql_tls::write_private(path, &text, true)?;
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
                // As a comment: the loader may not set it, the manager does.
                "--set-gtid-purged=COMMENTED".into(),
                "--source-data=2".into(),
                "--column-statistics=0".into(),
            ]);
        }
    }
    // The names come after `--`: never an option, whatever they say.
    args.extend(["--databases".into(), "--".into()]);
    args.extend(databases.iter().cloned());
    args
}

/// The command-line client's arguments: the loader's option file, no
/// local file read, no client command run (`\\!`, `source`), whatever the
/// dump says.
fn client_args(f: Flavor, options: &Path) -> Vec<String> {
    let mut args = vec![
        format!("--defaults-file={}", options.display()),
        "--binary-mode".into(),
        "--max-allowed-packet=1G".into(),
        "--local-infile=0".into(),
    ];
    args.push(match f {
        Flavor::Mariadb => "--sandbox".into(),
        Flavor::Mysql => "--commands=OFF".into(),
    });
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

/// Dump `databases` of `src` into the private server on `socket`, as
/// [`LOADER_USER`] with `loader_password`; progress goes to `progress`.
pub async fn load(
    cfg: &InstanceConfig,
    src: &Source<'_>,
    databases: &[String],
    socket: &Path,
    loader_password: &str,
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
    let loader = loader_option_file(
        &cfg.run_dir.join("import-loader.cnf"),
        socket,
        loader_password,
    )?;
    let mut client = programs.tokio_command(client_path);
    client
        .args(client_args(f, &loader))
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
    std::fs::remove_file(&loader).ok();
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

    #[test]
    fn names_follow_the_end_of_options_and_the_client_runs_nothing_of_its_own() {
        let account = SourceAccount {
            user: "importer".into(),
            password: "x".into(),
            ca: "/s/ca.crt".into(),
            client: None,
            donor_token: None,
        };
        let src = Source {
            host: "10.0.0.7",
            port: 3306,
            name: "10.0.0.7",
            account: &account,
        };
        for f in [Flavor::Mariadb, Flavor::Mysql] {
            let args = dump_args(f, &src, &["--result-file=/x".into()]);
            let end = args.iter().position(|a| a == "--").expect("--");
            assert_eq!(args[end - 1], "--databases");
            assert_eq!(args[end + 1..], ["--result-file=/x".to_string()]);
            let client = client_args(f, Path::new("/run/loader.cnf"));
            assert!(client.contains(&"--local-infile=0".to_string()));
            assert!(
                client.contains(&"--sandbox".to_string())
                    || client.contains(&"--commands=OFF".to_string())
            );
            assert!(client[0].starts_with("--defaults-file="), "{client:?}");
        }
    }
}
