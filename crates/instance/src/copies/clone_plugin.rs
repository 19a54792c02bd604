//! MySQL's physical copy: the clone plugin. The new replica's manager
//! starts a short-lived recipient server on an empty data directory (no
//! network, its own socket), and has it run `CLONE INSTANCE FROM` the
//! source's server over TLS, presenting this instance's certificate to an
//! account that requires one (X509). The copy lands in a directory of its
//! own (`DATA DIRECTORY`), so the recipient never restarts itself; once the
//! copy is complete the recipient stops and the copy becomes the data
//! directory. The copy carries the donor's `gtid_executed`: the new server
//! knows what it holds without any seeding.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cnmysql_api::names::REPLICATION_USER;
use cnmysql_core::flavor::{Sql, quote};
use mysql_async::prelude::*;

use crate::bootstrap::read_secret;
use crate::clone_progress::{ProgressCell, report, tail_lines, tail_text};
use crate::config::InstanceConfig;
use crate::sql;
use cnmysql_control::peer::PeerAddr;

/// The source is copying itself to another instance already: MySQL allows
/// one clone at a time. Not a failure; the clone is tried again shortly.
#[derive(Debug, thiserror::Error)]
#[error("{source_name} is cloning another instance (MySQL clones one at a time); waiting")]
pub struct SourceBusy {
    pub source_name: String,
}

/// How long each of the clone's stages took (file copy, page copy, redo
/// copy, file sync, ...), for whoever wonders where a slow clone went.
async fn log_stages(watcher: &mut mysql_async::Conn, source: &str) {
    let rows: Vec<(String, Option<i64>)> = watcher
        .query(
            "SELECT STAGE, TIMESTAMPDIFF(MICROSECOND, BEGIN_TIME, END_TIME) \
             FROM performance_schema.clone_progress ORDER BY ID",
        )
        .await
        .unwrap_or_default();
    let stages: Vec<String> = rows
        .iter()
        .filter_map(|(stage, us)| {
            Some(format!(
                "{} {:.1}s",
                stage.to_lowercase(),
                (*us)? as f64 / 1e6
            ))
        })
        .collect();
    tracing::info!(source, stages = stages.join(", "), "clone stages");
}

/// MySQL's error for a donor already serving a clone.
const ER_CLONE_TOO_MANY_CONCURRENT_CLONES: &str = "3634";

/// The server a clone copies, and how to reach it.
pub struct Donor {
    /// What logs and progress call it (an instance, or the import source).
    pub name: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// The CA its certificate must chain to.
    pub ca: PathBuf,
    /// The client certificate and key presented, for an account that
    /// requires one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The token a `cnmysql donor` asks for (an import by backup).
    pub token: Option<String>,
}

impl Donor {
    /// An instance of this cluster: the replication account, with this
    /// instance's certificate (the account requires X509).
    pub fn peer(cfg: &InstanceConfig, name: &str, peer: &PeerAddr) -> anyhow::Result<Donor> {
        Ok(Donor {
            name: name.to_string(),
            host: peer.host.clone(),
            port: peer.mysql_port,
            user: REPLICATION_USER.to_string(),
            password: read_secret(&cfg.secrets.replication_password)?,
            ca: cfg.server_tls_paths().peers_ca,
            client: Some((cfg.tls.cert.clone(), cfg.tls.key.clone())),
            token: None,
        })
    }

    fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// The recipient's configuration: just enough of a server to run a clone.
fn recipient_cnf(cfg: &InstanceConfig, datadir: &std::path::Path, donor: &Donor) -> String {
    let run = &cfg.run_dir;
    let client = donor
        .client
        .as_ref()
        .map(|(c, k)| {
            format!(
                "clone_ssl_cert = {}\nclone_ssl_key = {}\n",
                c.display(),
                k.display()
            )
        })
        .unwrap_or_default();
    format!(
        "# A short-lived clone recipient of the cnmysql instance manager.\n[mysqld]\n\
         datadir = {}\nsocket = {}\npid_file = {}\nskip_networking = ON\nskip_log_bin = ON\n\
         server_id = {}\nplugin_load_add = mysql_clone.so\nperformance_schema = ON\n\
         innodb_buffer_pool_size = 32M\ninnodb_redo_log_capacity = 48M\nmysqlx = OFF\n\
         secure_file_priv = NULL\nclone_ssl_ca = {}\n{client}\
         clone_valid_donor_list = {}\n",
        datadir.display(),
        run.join("recipient.sock").display(),
        run.join("recipient.pid").display(),
        cfg.server_id(),
        donor.ca.display(),
        donor.address(),
    )
}

/// An empty recipient server beside the data directory, started with the
/// clone plugin pointed at `donor` (`host:port`); `target` is where the copy
/// will go (both left over from a failed attempt are removed first).
async fn start_recipient(
    cfg: &InstanceConfig,
    donor: &Donor,
    recipient_dir: &std::path::Path,
    target: &std::path::Path,
) -> anyhow::Result<tokio::process::Child> {
    for d in [recipient_dir, target] {
        if d.exists() {
            std::fs::remove_dir_all(d)?;
        }
    }
    {
        let (cfg, dir) = (cfg.clone(), recipient_dir.to_path_buf());
        tokio::task::spawn_blocking(move || crate::bootstrap::prepare_empty_datadir_at(&cfg, &dir))
            .await??;
    }
    let cnf = cfg.run_dir.join("recipient.cnf");
    std::fs::write(&cnf, recipient_cnf(cfg, recipient_dir, donor))?;
    let mysqld = &cfg.programs.mysqld;
    let mut cmd = cfg.programs.tokio_command(mysqld);
    cmd.arg(format!("--defaults-file={}", cnf.display()));
    if nix::unistd::geteuid().is_root() {
        cmd.arg("--user=root");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn()
        .map_err(|e| cfg.programs.start_error(mysqld, &e))
}

/// Clone `donor` into this instance's data directory (which must not hold
/// an initialised server). The copy's GTID set is its own `gtid_executed`.
pub async fn clone_from(
    cfg: &InstanceConfig,
    donor: &Donor,
    progress: &ProgressCell,
) -> anyhow::Result<()> {
    let source = donor.name.as_str();
    let started = Instant::now();
    let set = |stage: &str, bytes: u64, expected: Option<u64>| {
        report(progress, source, started, stage, bytes, expected)
    };
    set("preparing a recipient", 0, None);
    let recipient_dir = cfg.data_dir.with_extension("recipient");
    let target = cfg.data_dir.with_extension("clone");
    let socket = cfg.run_dir.join("recipient.sock");
    let mut server = start_recipient(cfg, donor, &recipient_dir, &target).await?;
    let server_tail = tail_lines(server.stderr.take().expect("piped"), "clone recipient");
    let result = async {
        let opts = sql::socket_opts(&socket, "root", None);
        let mut conn = tokio::select! {
            c = sql::wait_connectable(&opts, Duration::from_secs(120)) => c?,
            st = server.wait() => anyhow::bail!(
                "the clone recipient server exited ({:?}): {}",
                st,
                tail_text(&server_tail)
            ),
        };
        let mut watcher = sql::wait_connectable(&opts, Duration::from_secs(10)).await?;
        let clone = |pw: &str| {
            format!(
                "CLONE INSTANCE FROM {}@{}:{} IDENTIFIED BY {pw} DATA DIRECTORY = {} REQUIRE SSL",
                quote(&donor.user),
                quote(&donor.host),
                donor.port,
                quote(&target.display().to_string()),
            )
        };
        let stmt = Sql::secret(clone(&quote(&donor.password)), clone("'<redacted>'"));
        tracing::info!(
            source,
            donor = donor.address(),
            "cloning with the clone plugin"
        );
        set("copying", 0, None);
        let copy_started = Instant::now();
        let stmts = [stmt];
        let copy = sql::exec_all(&mut conn, &stmts);
        tokio::pin!(copy);
        // Logged when the copy begins, every second and every 64 MiB on
        // fast links, and at its end.
        let (mut last_log, mut logged_bytes) = (Instant::now(), 0u64);
        let log_progress = || crate::clone_progress::log_progress(source, progress);
        loop {
            tokio::select! {
                r = &mut copy => {
                    if let Err(e) = r {
                        if e.to_string().contains(ER_CLONE_TOO_MANY_CONCURRENT_CLONES) {
                            return Err(SourceBusy { source_name: source.to_string() }.into());
                        }
                        return Err(e);
                    }
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    let row: Option<(Option<u64>, Option<u64>)> = watcher
                        .query_first(
                            "SELECT CAST(SUM(DATA) AS UNSIGNED), CAST(SUM(ESTIMATE) AS UNSIGNED) \
                             FROM performance_schema.clone_progress",
                        )
                        .await
                        .unwrap_or_else(|e| {
                            tracing::warn!(error = %e, "cannot read the clone's progress");
                            None
                        });
                    if let Some((Some(bytes), estimate)) = row {
                        set("copying", bytes, estimate.filter(|e| *e > 0));
                        if bytes > logged_bytes
                            && (logged_bytes == 0
                                || last_log.elapsed() >= Duration::from_secs(1)
                                || bytes >= logged_bytes + 64 * 1024 * 1024)
                        {
                            (last_log, logged_bytes) = (Instant::now(), bytes);
                            log_progress();
                        }
                    }
                }
            }
        }
        let bytes: Option<u64> = watcher
            .query_first(
                "SELECT CAST(SUM(DATA) AS UNSIGNED) FROM performance_schema.clone_progress",
            )
            .await?
            .flatten();
        let bytes = bytes.unwrap_or(0);
        crate::clone_progress::log_throughput(source, bytes, copy_started, "clone copied");
        log_stages(&mut watcher, source).await;
        set("finishing", bytes, Some(bytes));
        if bytes > logged_bytes {
            log_progress();
        }
        let _ = watcher.query_drop("SHUTDOWN").await;
        Ok::<_, anyhow::Error>(bytes)
    }
    .await;
    // A failed clone leaves nothing worth a clean shutdown.
    let grace = if result.is_ok() { 60 } else { 0 };
    if tokio::time::timeout(Duration::from_secs(grace), server.wait())
        .await
        .is_err()
    {
        if grace > 0 {
            tracing::warn!("the clone recipient did not stop within 60 s; killing it");
        }
        let _ = server.kill().await;
    }
    let _ = std::fs::remove_dir_all(&recipient_dir);
    let bytes = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&target);
            return Err(e);
        }
    };
    crate::bootstrap::replace_data_dir(cfg, &target, "a clone")?;
    set("done", bytes, Some(bytes));
    crate::clone_progress::log_throughput(source, bytes, started, "clone complete");
    Ok(())
}
