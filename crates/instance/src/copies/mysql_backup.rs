//! A MySQL base backup: the clone plugin copies the running server into a
//! directory beside its data (`CLONE LOCAL DATA DIRECTORY`, consistent, the
//! server keeps serving), a private server opens the copy to read the GTID
//! set it holds (proving it starts), and the directory is streamed as a tar
//! archive, then removed. The GTID set travels in a response header, ahead
//! of the stream.

use std::process::Stdio;
use std::time::Instant;

use bytes::Bytes;
use futures::Stream;
use mysql_async::prelude::*;

use crate::bootstrap::read_secret;
use crate::clone_progress::{Tail, tail_lines, tail_text};
use crate::config::InstanceConfig;
use crate::private_server::{self, PrivateServer};
use crate::sql;

/// The response header with the GTID set the backup holds.
pub use cnmysql_control::contract::GTID_HEADER;

/// Clone, verify, and return the GTID set and the tar stream.
pub async fn start(
    cfg: &InstanceConfig,
) -> anyhow::Result<(
    String,
    u64,
    impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
)> {
    let dir = cfg.data_dir.with_extension("backup");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let began = Instant::now();
    let admin = read_secret(&cfg.secrets.admin_password)?;
    let opts = sql::socket_opts(&cfg.socket(), cnmysql_api::names::ADMIN_USER, Some(&admin));
    let mut conn = mysql_async::Conn::new(opts).await?;
    conn.query_drop(format!(
        "CLONE LOCAL DATA DIRECTORY = {}",
        cnmysql_core::flavor::quote(&dir.display().to_string())
    ))
    .await
    .map_err(|e| anyhow::anyhow!("CLONE LOCAL DATA DIRECTORY failed: {e}"))?;
    drop(conn);
    let (socket, pid) = private_server::paths(cfg, "backup");
    let mut server =
        PrivateServer::start(cfg, private_server::bare_args(&dir, &socket, &pid), &socket).await?;
    let gtid: Option<String> = server.conn.query_first("SELECT @@gtid_executed").await?;
    server.stop().await?;
    let gtid = gtid.unwrap_or_default().replace('\n', "");
    // The copy's own identity: a server made from it gets a new one.
    let _ = std::fs::remove_file(dir.join("auto.cnf"));
    let size = crate::clone::dir_size(&dir);
    tracing::info!(
        gtid,
        bytes = size,
        seconds = began.elapsed().as_secs_f64(),
        "cloned into a directory; streaming it"
    );
    let mut tar = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(&dir)
        .args(["-cf", "-", "."])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run tar: {e}"))?;
    let stdout = tar.stdout.take().expect("piped");
    let tail: Tail = tail_lines(tar.stderr.take().expect("piped"), "tar");
    let reader = tokio_util::io::ReaderStream::with_capacity(stdout, 1 << 20);
    let stream = futures::stream::unfold(
        (reader, Some(tar), tail, dir),
        |(mut reader, child, tail, dir)| async move {
            use futures::StreamExt;
            let mut child = child?;
            match reader.next().await {
                Some(Ok(b)) => Some((Ok(b), (reader, Some(child), tail, dir))),
                Some(Err(e)) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    Some((Err(e), (reader, None, tail, dir)))
                }
                None => {
                    let status = child.wait().await;
                    let _ = std::fs::remove_dir_all(&dir);
                    match status {
                        Ok(s) if s.success() => None,
                        other => Some((
                            Err(std::io::Error::other(format!(
                                "tar failed ({other:?}): {}",
                                tail_text(&tail)
                            ))),
                            (reader, None, tail, dir),
                        )),
                    }
                }
            }
        },
    );
    Ok((gtid, size, stream))
}
