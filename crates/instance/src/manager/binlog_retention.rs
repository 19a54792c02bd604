//! Purging this instance's binary logs by the core's rule
//! (`cnmysql_core::binlog_retention`): every few seconds it lists the
//! files, reads where each ends (once: a finished file does not change),
//! asks the cluster's status who reads them and how far they got, and
//! purges what nobody needs. The server never purges by itself: the
//! settings that would make it are the operator's, and off.

use std::collections::BTreeMap;

use cnmysql_api::BinlogsStatus;
use cnmysql_core::binlog_retention::{self, BinlogFile};
use cnmysql_gtid::History;

use super::link::Link;
use super::*;

/// How often the files are looked at.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// The binary log retention concern: it owns what it learnt of the files
/// and the status `/status` reports.
pub(super) struct BinlogRetention<C: ClusterState> {
    link: Link,
    cluster: Arc<C>,
    /// Where each finished file ends, by name, as read from the mysqld
    /// whose pid is kept beside: a re-clone restarts the server, and its
    /// new binary logs may reuse the names.
    ends: Mutex<(u32, BTreeMap<String, Option<History>>)>,
    status: Mutex<Option<BinlogsStatus>>,
}

impl<C: ClusterState> BinlogRetention<C> {
    pub fn new(link: Link, cluster: Arc<C>) -> Self {
        BinlogRetention {
            link,
            cluster,
            ends: Mutex::default(),
            status: Mutex::default(),
        }
    }

    /// The binary logs as last looked at.
    pub fn status(&self) -> Option<BinlogsStatus> {
        self.status.lock().unwrap().clone()
    }

    pub async fn run(self: Arc<Self>) {
        loop {
            if self.link.sleep_or_stop(INTERVAL).await {
                return;
            }
            if !self.link.server_running() {
                continue;
            }
            let Some(pool) = self.link.pool() else {
                continue;
            };
            let pass = tokio::time::timeout(Duration::from_secs(10), self.pass(&pool)).await;
            let error = match pass {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("{e:#}")),
                Err(_) => Some("mysqld did not answer within 10 s".to_string()),
            };
            let mut st = self.status.lock().unwrap();
            let st = st.get_or_insert_with(Default::default);
            if let Some(e) = &error
                && st.error != *e
            {
                tracing::warn!(error = %e, "cannot look after the binary logs");
            }
            st.error = error.unwrap_or_default();
        }
    }

    /// One look: list, decide, purge, report.
    async fn pass(&self, pool: &Pool) -> anyhow::Result<()> {
        let cfg = &self.link.cfg;
        let mut conn = pool.get_conn().await?;
        let listed = list(&mut conn).await?;
        self.forget_another_servers_files();
        let files = self.files(&mut conn, &listed).await?;
        let status = self.cluster.get().await?;
        let needs = binlog_retention::needs(&cfg.spec, &cfg.cluster, &status, &cfg.instance);
        let pressure = binlog_retention::pressure(
            &super::volumes::usage(cfg),
            cfg.shared_volumes,
            // Writes held for a copy are no sign of a full volume.
            self.link
                .writes_refused()
                .is_some_and(|r| r != cnmysql_core::copy_unblock::REASON),
            &status,
        );
        let policy = binlog_retention::policy(&cfg.spec, pressure);
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let decision = binlog_retention::decide(&files, &needs, policy, now_ms);
        let mut kept_for = decision.kept_for.clone();
        if let Some(to) = &decision.purge_to {
            match purge(&mut conn, to).await {
                Ok(()) => tracing::info!(
                    to = %to,
                    files = decision.files,
                    bytes = decision.bytes,
                    pressure,
                    "binary logs purged"
                ),
                // A connected reader (a replica, a replica cluster) still
                // reads a file it would remove: MariaDB refuses the whole
                // statement; the next look tries again.
                Err(e) if e.to_string().contains("in use") => {
                    kept_for = "a connected reader is reading it".into();
                }
                Err(e) => return Err(e),
            }
        }
        // What went, from the listings (MySQL may stop short of `to` at a
        // file a connected reader reads, with a warning only).
        let after = list(&mut conn).await?;
        let gone: Vec<u64> = listed
            .iter()
            .filter(|(name, _)| !after.iter().any(|(n, _)| n == name))
            .map(|(_, bytes)| *bytes)
            .collect();
        let purged = (!gone.is_empty()).then(|| (gone.len(), gone.iter().sum()));
        self.ends
            .lock()
            .unwrap()
            .1
            .retain(|name, _| after.iter().any(|(n, _)| n == name));
        self.report(&after, kept_for, purged);
        Ok(())
    }

    /// What was read of the files of a server no longer running is
    /// forgotten.
    fn forget_another_servers_files(&self) {
        let pid = match self.link.supervisor.state() {
            ServerState::Running { pid } => pid,
            _ => 0,
        };
        let mut ends = self.ends.lock().unwrap();
        if ends.0 != pid {
            *ends = (pid, BTreeMap::new());
        }
    }

    /// The files with their ends (read once) and last writes.
    async fn files(
        &self,
        conn: &mut mysql_async::Conn,
        listed: &[(String, u64)],
    ) -> anyhow::Result<Vec<BinlogFile>> {
        let dir = self.link.cfg.binlog_dir();
        let flavor = self.link.cfg.flavor();
        let mut out = Vec::with_capacity(listed.len());
        for (i, (name, bytes)) in listed.iter().enumerate() {
            let ends = match listed.get(i + 1) {
                None => None,
                Some((next, _)) => {
                    let known = self.ends.lock().unwrap().1.get(name).cloned();
                    match known {
                        Some(e) => e,
                        None => {
                            let e = file_start(conn, flavor, next).await?;
                            self.ends.lock().unwrap().1.insert(name.clone(), e.clone());
                            e
                        }
                    }
                }
            };
            let written_ms = std::fs::metadata(dir.join(name))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
                .map_or(i64::MAX, |t| t.as_millisecond());
            out.push(BinlogFile {
                name: name.clone(),
                bytes: *bytes,
                ends,
                written_ms,
            });
        }
        Ok(out)
    }

    fn report(&self, files: &[(String, u64)], kept_for: String, purged: Option<(usize, u64)>) {
        let mut st = self.status.lock().unwrap();
        let st = st.get_or_insert_with(Default::default);
        st.files = files.len() as u32;
        st.bytes = files.iter().map(|(_, b)| b).sum();
        st.oldest = files.first().map(|(n, _)| n.clone()).unwrap_or_default();
        st.kept_for = kept_for;
        if let Some((n, bytes)) = purged {
            st.purged_files += n as u64;
            st.purged_bytes += bytes;
            st.last_purge = jiff::Timestamp::now().to_string();
        }
    }
}

/// The server's binary log files and sizes, oldest first.
async fn list(conn: &mut mysql_async::Conn) -> anyhow::Result<Vec<(String, u64)>> {
    let rows: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| Some((r.get::<String, _>(0)?, r.get::<u64, _>(1)?)))
        .collect())
}

/// Everything written before `file`: its `Previous_gtids` (MySQL) or
/// `Gtid_list` (MariaDB) event, among its first few. None when it has
/// none or it cannot be read as a history (the file is then kept).
async fn file_start(
    conn: &mut mysql_async::Conn,
    flavor: Flavor,
    file: &str,
) -> anyhow::Result<Option<History>> {
    let kind = match flavor {
        Flavor::Mysql => "Previous_gtids",
        Flavor::Mariadb => "Gtid_list",
    };
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SHOW BINLOG EVENTS IN '{}' LIMIT 6",
            checked_name(file)?
        ))
        .await?;
    Ok(rows.iter().find_map(|r| {
        let event: String = r.get(2)?;
        let info: String = r.get(5).unwrap_or_default();
        (event == kind).then(|| binlog_retention::parse_file_end(flavor, &info))?
    }))
}

/// `PURGE BINARY LOGS TO file`.
async fn purge(conn: &mut mysql_async::Conn, file: &str) -> anyhow::Result<()> {
    conn.query_drop(format!("PURGE BINARY LOGS TO '{}'", checked_name(file)?))
        .await?;
    Ok(())
}

/// A file name as the server lists it, checked before it is put in a
/// statement: letters, digits, `.`, `-`, `_`.
fn checked_name(file: &str) -> anyhow::Result<&str> {
    let ok = !file.is_empty()
        && file
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    anyhow::ensure!(ok, "unexpected binary log file name {file:?}");
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_file_names_reach_a_statement() {
        assert!(checked_name("mysql-bin.000012").is_ok());
        for bad in ["", "x' OR '1", "../etc/passwd", "a b", "a\\b"] {
            assert!(checked_name(bad).is_err(), "{bad}");
        }
    }
}
