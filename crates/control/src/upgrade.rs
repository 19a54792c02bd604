//! The client's side of the manager's upgrades: push this process's own
//! executable, ask for one already on the instance, restart in place and
//! wait until the new image answers ready. (The manager's side is
//! `cnmysql_instance::upgrade`.)

use bytes::Bytes;
use futures::StreamExt;

use crate::client::ControlClient;
use crate::contract::{self, FromFile};

/// The operator's side: stream this process's own executable (as running,
/// even if the file was replaced on disk since) to the manager at
/// `host:port` with its SHA-256 `hash` in the header.
pub async fn push(client: &ControlClient, host: &str, port: u16, hash: &str) -> anyhow::Result<()> {
    use http_body_util::BodyExt;
    let file = tokio::fs::File::open("/proc/self/exe").await?;
    let len = file.metadata().await?.len();
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024)
        .map(|r| r.map(hyper::body::Frame::data));
    let body = BodyExt::boxed(http_body_util::StreamBody::new(stream));
    let resp = client
        .send_body(
            host,
            port,
            "POST",
            contract::UPGRADE,
            &[
                (cnmysql_api::names::MANAGER_HASH_HEADER, hash.to_string()),
                ("content-length", len.to_string()),
                ("content-type", "application/octet-stream".into()),
            ],
            body,
        )
        .await?;
    let code = resp.status();
    let text = resp.into_body().collect().await?.to_bytes();
    if !code.is_success() {
        anyhow::bail!(
            "the instance manager refused the upgrade ({code}): {}",
            String::from_utf8_lossy(&text)
        );
    }
    Ok(())
}

/// The operator's side of an upgrade from a file on the instance: ask the
/// manager at `host:port` to check `path` (against `sha256` when given)
/// and re-exec into it. The file's SHA-256.
pub async fn from_file(
    client: &ControlClient,
    host: &str,
    port: u16,
    path: &str,
    sha256: Option<&str>,
) -> anyhow::Result<String> {
    let body = serde_json::to_string(&FromFile {
        path: path.to_string(),
        sha256: sha256.map(str::to_string),
    })?;
    let (code, text) = client
        .post(
            host,
            port,
            contract::UPGRADE_FROM_FILE,
            &[("content-type", "application/json".into())],
            body.into(),
        )
        .await?;
    anyhow::ensure!(
        code == 200,
        "the instance manager refused the upgrade ({code}): {text}"
    );
    Ok(text.trim().to_string())
}

/// An in-place restart as it was seen from outside: the manager's status
/// before and once the new image answered ready.
pub struct Restarted {
    pub before: cnmysql_core::status::InstanceStatus,
    pub after: cnmysql_core::status::InstanceStatus,
    pub took: std::time::Duration,
}

impl Restarted {
    /// One line for humans: how long, and that mysqld kept its PID.
    pub fn describe(&self, instance: &str) -> String {
        let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or("-".into());
        format!(
            "{instance}: instance manager restarted in place in {:.2}s (pid {} → {}, mysqld pid {} → {}, mysqld up {} s)",
            self.took.as_secs_f64(),
            self.before.manager_pid,
            self.after.manager_pid,
            pid(self.before.mysqld_pid),
            pid(self.after.mysqld_pid),
            self.after.uptime_seconds.unwrap_or_default()
        )
    }
}

/// Restart the manager at `host:port` in place and wait (up to `limit`)
/// until the new image answers ready.
pub async fn restart_in_place_and_wait(
    client: &ControlClient,
    host: &str,
    port: u16,
    limit: std::time::Duration,
) -> anyhow::Result<Restarted> {
    use cnmysql_core::status::InstanceStatus;
    let before: InstanceStatus = client
        .get_json(host, port, contract::STATUS)
        .await
        .map_err(|e| anyhow::anyhow!("the instance manager does not answer: {e}"))?;
    let began = std::time::Instant::now();
    // A refusal is final; a lost answer is not (the manager may have
    // re-executed before it got out): its status tells.
    let lost_answer = match client
        .post(host, port, contract::RESTART_IN_PLACE, &[], Bytes::new())
        .await
    {
        Ok((200, _)) => None,
        Ok((code, text)) => {
            anyhow::bail!("the instance manager refused to restart in place ({code}): {text}")
        }
        Err(e) => Some(e),
    };
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if let Ok(after) = client
            .get_json::<InstanceStatus>(host, port, contract::STATUS)
            .await
            && after.manager_started_at != before.manager_started_at
            && after.ready
        {
            return Ok(Restarted {
                before,
                after,
                took: began.elapsed(),
            });
        }
        if began.elapsed() > limit {
            match lost_answer {
                Some(e) => anyhow::bail!("the restart request failed: {e}"),
                None => anyhow::bail!(
                    "the restarted instance manager is not ready after {}s; see its log",
                    limit.as_secs()
                ),
            }
        }
    }
}
