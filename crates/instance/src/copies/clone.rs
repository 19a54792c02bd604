//! Physical clones. MariaDB: the source's manager streams `mariadb-backup
//! --backup --stream=mbstream` over its mTLS control API; the new replica's
//! manager extracts it, prepares it, and learns the GTID position the copy
//! is consistent with. MySQL copies with its clone plugin instead
//! (clone_plugin.rs).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cnmysql_api::Flavor;
use futures::Stream;
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;

use crate::bootstrap::read_secret;
use crate::client::ControlClient;
use crate::clone_progress::{
    ProgressCell, Tail, log_progress, log_throughput, report, tail_lines, tail_text,
};
use crate::config::{InstanceConfig, render_backup_cnf};
use cnmysql_control::peer::PeerAddr;

/// Header carrying the source's data directory size, for progress and ETA.
pub use cnmysql_control::contract::{HISTORY_HEADER, SIZE_HEADER};

/// Total size of the regular files below `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) if m.is_file() => total += m.len(),
                _ => {}
            }
        }
    }
    total
}

/// Start a streaming backup of this instance's server. Returns the data
/// directory size and the byte stream; the stream ends with an error if the
/// backup tool fails, so the receiver never mistakes a truncated copy for a
/// complete one.
pub fn start_backup(
    cfg: &InstanceConfig,
) -> anyhow::Result<(
    u64,
    impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
)> {
    let admin = read_secret(&cfg.secrets.admin_password)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let target = unique_dir(&cfg.run_dir.join(format!("backup-{nanos}")));
    std::fs::create_dir_all(&target)?;
    // The administrator's options, this backup's own, gone with its stream.
    let cnf = Removed(target.with_extension("cnf"));
    cnmysql_tls::write_private(&cnf.0, &render_backup_cnf(cfg, &admin), true)?;
    let (backup, _) = cfg.programs.mariadb_backup()?;
    let mut cmd = cfg.programs.tokio_command(backup);
    backup_args(&mut cmd, &cnf.0, &target);
    let child = cmd
        .spawn()
        .map_err(|e| cfg.programs.start_error(backup, &e))?;
    let size = dir_size(&cfg.data_dir);
    tracing::info!(bytes = size, "streaming a physical backup");
    Ok((size, stream_backup(child, target, cnf)))
}

/// A file removed when this is dropped.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `mariadb-backup` streaming a backup to its output, with the options of
/// `defaults` and its work directory `target`.
pub(crate) fn backup_args<'a>(
    cmd: &'a mut tokio::process::Command,
    defaults: &Path,
    target: &Path,
) -> &'a mut tokio::process::Command {
    cmd.arg(format!("--defaults-file={}", defaults.display()))
        .arg("--backup")
        .arg("--stream=mbstream")
        .arg(format!("--target-dir={}", target.display()))
        .arg("--parallel=2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
}

/// The output of a running `mariadb-backup --backup --stream`, as a byte
/// stream that ends with an error if the tool fails (a truncated copy is
/// never taken for a complete one). `target` (its work directory) is
/// removed at the end; `keep` is held until then.
pub(crate) fn stream_backup<K: Send + 'static>(
    mut child: tokio::process::Child,
    target: PathBuf,
    keep: K,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let stdout = child.stdout.take().expect("piped");
    grow_pipe(&stdout);
    let tail = tail_lines(child.stderr.take().expect("piped"), "backup");
    let reader = tokio_util::io::ReaderStream::with_capacity(stdout, 1 << 20);
    futures::stream::unfold(
        (
            reader,
            Some(child),
            tail,
            target,
            Instant::now(),
            0u64,
            keep,
        ),
        |(mut reader, child, tail, target, started, sent, keep)| async move {
            use futures::StreamExt;
            let mut child = child?;
            match reader.next().await {
                Some(Ok(b)) => {
                    let n = b.len() as u64;
                    Some((
                        Ok(b),
                        (reader, Some(child), tail, target, started, sent + n, keep),
                    ))
                }
                Some(Err(e)) => {
                    let _ = std::fs::remove_dir_all(&target);
                    Some((Err(e), (reader, None, tail, target, started, sent, keep)))
                }
                None => {
                    let status = child.wait().await;
                    let _ = std::fs::remove_dir_all(&target);
                    release_freed_memory();
                    match status {
                        Ok(s) if s.success() => {
                            let secs = started.elapsed().as_secs_f64();
                            tracing::info!(
                                bytes = sent,
                                seconds = secs,
                                mb_per_s = sent as f64 / 1e6 / secs.max(1e-9),
                                "backup stream complete"
                            );
                            None
                        }
                        other => {
                            let msg = format!("backup failed ({other:?}): {}", tail_text(&tail));
                            tracing::error!("{msg}");
                            Some((
                                Err(std::io::Error::other(msg)),
                                (reader, None, tail, target, started, sent, keep),
                            ))
                        }
                    }
                }
            }
        },
    )
}

/// Hand the stream buffers back to the system once a copy is over, so an
/// idle manager stays small after serving clones.
pub fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Larger pipe buffers mean fewer wake-ups per megabyte on bulk copies.
fn grow_pipe(fd: &impl std::os::fd::AsFd) {
    let _ = nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
}

fn unique_dir(p: &Path) -> PathBuf {
    let mut n = 0;
    loop {
        let cand = if n == 0 {
            p.to_path_buf()
        } else {
            PathBuf::from(format!("{}-{n}", p.display()))
        };
        if !cand.exists() {
            return cand;
        }
        n += 1;
    }
}

/// The GTID position recorded by the backup tool, if the source had any history.
pub fn backup_gtid(dir: &Path) -> anyhow::Result<String> {
    for name in ["mariadb_backup_binlog_info", "xtrabackup_binlog_info"] {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            // file <TAB> position [<TAB> gtid]
            let gtid = text
                .lines()
                .next()
                .unwrap_or("")
                .split('\t')
                .nth(2)
                .unwrap_or("")
                .trim();
            return Ok(gtid.to_string());
        }
    }
    // A source without binary log events writes no binlog info: empty history.
    Ok(String::new())
}

/// Clone `source` into this instance's data directory (which must not hold
/// an initialised server). Returns the GTID position of the copy.
/// What a finished MariaDB copy holds: the position it is consistent with
/// and the binlog state to give its empty binary log (the donor's older
/// servers' entries up to that position, and the position). Empty for MySQL,
/// whose copy knows its own history.
#[derive(Debug, Default)]
pub struct Cloned {
    pub position: String,
    pub binlog_state: String,
}

/// The binlog state a copy consistent at `position` holds, from the donor's
/// history sent before the stream; the position alone when that history is
/// missing (an older donor) or unreadable.
fn copy_state(position: &str, donor_history: Option<&str>) -> String {
    use cnmysql_gtid::mariadb::{BinlogState, GtidPos};
    let Ok(pos) = position.parse::<GtidPos>() else {
        return position.to_string();
    };
    let history = donor_history
        .and_then(|h| h.parse::<BinlogState>().ok())
        .unwrap_or_default();
    history.held_by_copy_at(&pos).load_text()
}

pub async fn clone_from(
    cfg: &InstanceConfig,
    source: &str,
    peer: &PeerAddr,
    client: &ControlClient,
    progress: &ProgressCell,
) -> anyhow::Result<Cloned> {
    if cfg.flavor() == Flavor::Mysql {
        let donor = crate::clone_plugin::Donor::peer(cfg, source, peer)?;
        crate::clone_plugin::clone_from(cfg, &donor, progress).await?;
        return Ok(Cloned::default());
    }
    let started = Instant::now();
    report(progress, source, started, "connecting", 0, None);
    let resp = client
        .clone()
        .with_connect_timeout(Duration::from_secs(10))
        .with_server_name(peer.tls_name.clone())
        .send(&peer.host, peer.control_port, "GET", "/backup", &[], None)
        .await?;
    receive_backup(cfg, source, resp, progress).await
}

/// Receive a `mariadb-backup` stream (`resp`, from a peer's manager or
/// `cnmysql donor`) into this instance's data directory: extracted,
/// prepared, installed. What the copy holds.
pub(crate) async fn receive_backup(
    cfg: &InstanceConfig,
    source: &str,
    resp: hyper::Response<hyper::body::Incoming>,
    progress: &ProgressCell,
) -> anyhow::Result<Cloned> {
    let tmp = cfg.data_dir.with_extension("clone");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let started = Instant::now();
    let set = |stage: &str, bytes: u64, expected: Option<u64>| {
        report(progress, source, started, stage, bytes, expected)
    };
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        anyhow::bail!(
            "{source} refused the backup: {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let expected = resp
        .headers()
        .get(SIZE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let donor_history = resp
        .headers()
        .get(HISTORY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (mut extract, mut stdin, extract_tail) = spawn_extract(cfg, &tmp)?;
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    let mut last_log = Instant::now();
    let mut next_report = 64 * 1024 * 1024u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            anyhow::anyhow!("the backup stream from {source} broke after {bytes} bytes: {e}")
        })?;
        if let Ok(data) = frame.into_data() {
            stdin.write_all(&data).await?;
            bytes += data.len() as u64;
            // Report every second, and every 64 MiB on fast links.
            if last_log.elapsed() >= Duration::from_secs(1) || bytes >= next_report {
                last_log = Instant::now();
                next_report = bytes + 64 * 1024 * 1024;
                set("copying", bytes, expected);
                log_progress(source, progress);
            }
        }
    }
    stdin.flush().await?;
    drop(stdin);
    finish_extract(&mut extract, &extract_tail).await?;
    log_throughput(source, bytes, started, "backup copied; preparing");
    set("preparing", bytes, expected);
    let gtid = prepare_and_install(cfg, &tmp).await?;
    set("done", bytes, expected);
    release_freed_memory();
    tracing::info!(
        source,
        gtid,
        seconds = started.elapsed().as_secs_f64(),
        "clone complete"
    );
    let binlog_state = copy_state(&gtid, donor_history.as_deref());
    Ok(Cloned {
        position: gtid,
        binlog_state,
    })
}

/// Start `mbstream -x` into `tmp`: the process, its input, its error tail.
pub(crate) fn spawn_extract(
    cfg: &InstanceConfig,
    tmp: &Path,
) -> anyhow::Result<(tokio::process::Child, tokio::process::ChildStdin, Tail)> {
    let (_, extractor) = cfg.programs.mariadb_backup()?;
    let mut extract = cfg
        .programs
        .tokio_command(extractor)
        .arg("-x")
        .arg("-C")
        .arg(tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| cfg.programs.start_error(extractor, &e))?;
    let tail = tail_lines(extract.stderr.take().expect("piped"), "extract");
    let stdin = extract.stdin.take().expect("piped");
    grow_pipe(&stdin);
    Ok((extract, stdin, tail))
}

/// Wait for `mbstream -x` to finish, with its words when it failed.
pub(crate) async fn finish_extract(
    extract: &mut tokio::process::Child,
    tail: &Arc<Mutex<VecDeque<String>>>,
) -> anyhow::Result<()> {
    let st = extract.wait().await?;
    if !st.success() {
        anyhow::bail!("extracting the backup failed ({st}): {}", tail_text(tail));
    }
    Ok(())
}

/// `mariadb-backup --prepare` the unpacked backup in `tmp`, then make it
/// the data directory. The GTID position it is consistent with.
pub(crate) async fn prepare_and_install(
    cfg: &InstanceConfig,
    tmp: &Path,
) -> anyhow::Result<String> {
    let (backup, _) = cfg.programs.mariadb_backup()?;
    let mut prep = cfg.programs.tokio_command(backup);
    prep.arg("--prepare")
        .arg(format!("--target-dir={}", tmp.display()))
        .arg("--use-memory=256M")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut prep = prep.spawn()?;
    let prep_tail = tail_lines(prep.stderr.take().expect("piped"), "prepare");
    let st = prep.wait().await?;
    if !st.success() {
        anyhow::bail!(
            "preparing the backup failed ({st}): {}",
            tail_text(&prep_tail)
        );
    }
    let gtid = backup_gtid(tmp)?;
    crate::bootstrap::replace_data_dir(cfg, tmp, "a backup")?;
    Ok(gtid)
}

#[cfg(test)]
mod tests {
    use super::copy_state;

    #[test]
    fn a_copy_is_given_the_older_servers_it_holds() {
        assert_eq!(
            copy_state("0-2-4100", Some("0-1-1971,0-2-4000,0-4-5000")),
            "0-1-1971,0-2-4100"
        );
        // A donor that sends no history (an older manager): the position.
        assert_eq!(copy_state("0-2-4100", None), "0-2-4100");
        assert_eq!(copy_state("0-2-4100", Some("not a state")), "0-2-4100");
    }
}
