//! Base backups in the store:
//!
//! ```text
//! <prefix>/base/<id>/data.mbstream.zst   the physical backup, compressed
//! <prefix>/base/<id>/backup.json         its manifest, written last
//! ```
//!
//! A backup without a manifest never finished and is not used; a failed one
//! has a manifest saying why. The manifest records the GTID position the
//! backup is consistent with (read from the stream as it passes), its
//! sizes, the SHA-256 of what was stored, and when it started and stopped.

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use cnmysql_api::Flavor;
use cnmysql_api::backup::BackupRecord;

use crate::destination::Destination;
use crate::stored_stream::{self, Stored};

pub const BASE: &str = "base";

/// A base backup's manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    #[serde(flatten)]
    pub record: BackupRecord,
    pub flavor: Flavor,
    /// `mbstream` (MariaDB) or `tar` (MySQL, a cloned data directory).
    pub format: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_version: String,
}

impl Manifest {
    pub fn stored(&self) -> Stored {
        Stored {
            key: self.key.clone(),
            raw_bytes: self.record.raw_bytes,
            stored_bytes: self.record.stored_bytes,
            sha256: self.sha256.clone(),
        }
    }

    pub fn completed(&self) -> bool {
        self.record.phase == "completed"
    }

    /// When it stopped, in microseconds.
    pub fn stopped_us(&self) -> Option<i64> {
        self.record
            .stopped_at
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| t.as_microsecond())
    }
}

/// A new backup's id: its start time, sortable.
pub fn new_id(now: jiff::Timestamp) -> String {
    now.strftime("%Y%m%dT%H%M%SZ").to_string()
}

fn manifest_key(id: &str) -> String {
    format!("{BASE}/{id}/backup.json")
}

/// Store a MariaDB backup stream (`mariadb-backup --stream=mbstream`) as
/// backup `id`, taken on `instance`. The manifest is written either way:
/// `completed` with the GTID position read from the stream as it passes,
/// or `failed` with the reason.
pub async fn store_mbstream<S, E>(
    dest: &Destination,
    id: &str,
    instance: &str,
    server_version: &str,
    body: S,
) -> Manifest
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static,
    E: Into<std::io::Error> + 'static,
{
    let scanner = std::sync::Arc::new(std::sync::Mutex::new(crate::mbstream::Scanner::new()));
    let seen = {
        let scanner = scanner.clone();
        body.map_err(Into::into).inspect_ok(move |b: &Bytes| {
            scanner.lock().unwrap().feed(b);
        })
    };
    let head = Manifest::new(id, instance, Flavor::Mariadb, "mbstream", server_version);
    store_as(dest, head, seen.boxed(), move || {
        scanner.lock().unwrap().gtid()
    })
    .await
}

/// Store a MySQL backup (a cloned data directory as a tar stream) holding
/// the GTID set `gtid`, as backup `id`.
pub async fn store_tar<S, E>(
    dest: &Destination,
    id: &str,
    instance: &str,
    server_version: &str,
    gtid: &str,
    body: S,
) -> Manifest
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static,
    E: Into<std::io::Error> + 'static,
{
    let head = Manifest::new(id, instance, Flavor::Mysql, "tar", server_version);
    let gtid = gtid.to_string();
    // Empty: the server had executed no transaction yet.
    let known = move || Ok(gtid.clone());
    store_as(dest, head, body.map_err(Into::into).boxed(), known).await
}

impl Manifest {
    fn new(
        id: &str,
        instance: &str,
        flavor: Flavor,
        format: &str,
        server_version: &str,
    ) -> Manifest {
        Manifest {
            record: BackupRecord {
                id: id.to_string(),
                phase: "completed".into(),
                instance: instance.to_string(),
                started_at: jiff::Timestamp::now().to_string(),
                ..Default::default()
            },
            flavor,
            format: format.into(),
            key: String::new(),
            sha256: String::new(),
            server_version: server_version.to_string(),
        }
    }
}

async fn store_as(
    dest: &Destination,
    mut m: Manifest,
    body: futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>,
    gtid: impl FnOnce() -> Result<String, String>,
) -> Manifest {
    let name = format!("{BASE}/{}/data.{}.zst", m.record.id, m.format);
    let result = stored_stream::store(dest, &name, body).await;
    m.record.stopped_at = jiff::Timestamp::now().to_string();
    let gtid = gtid();
    m.record.gtid = gtid.clone().unwrap_or_default();
    match result {
        Ok(stored) if gtid.is_ok() => {
            m.key = stored.key;
            m.sha256 = stored.sha256;
            m.record.raw_bytes = stored.raw_bytes;
            m.record.stored_bytes = stored.stored_bytes;
        }
        Ok(_) => {
            m.record.phase = "failed".into();
            m.record.error = format!(
                "the backup cannot anchor a recovery: {}",
                gtid.err().unwrap_or_default()
            );
        }
        Err(e) => {
            m.record.phase = "failed".into();
            m.record.error = format!("{e:#}");
        }
    }
    if let Err(e) = write_manifest(dest, &m).await {
        m.record.phase = "failed".into();
        m.record.error = format!("the manifest could not be stored: {e}");
    }
    m
}

pub async fn write_manifest(dest: &Destination, m: &Manifest) -> anyhow::Result<()> {
    let key = dest.key(&manifest_key(&m.record.id));
    dest.store
        .put(&key, PutPayload::from(serde_json::to_vec_pretty(m)?))
        .await?;
    Ok(())
}

/// Every backup with a manifest, oldest first.
pub async fn list(dest: &Destination) -> anyhow::Result<Vec<Manifest>> {
    let prefix = dest.key(BASE);
    let listed = dest.store.list_with_delimiter(Some(&prefix)).await?;
    let mut out = Vec::new();
    for p in listed.common_prefixes {
        let Some(id) = p.filename() else { continue };
        let key = dest.key(&manifest_key(id));
        match dest.store.get(&key).await {
            Ok(r) => {
                let bytes = r.bytes().await?;
                let m: Manifest = serde_json::from_slice(&bytes)
                    .map_err(|e| anyhow::anyhow!("{key} cannot be read: {e}"))?;
                out.push(m);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort_by(|a, b| a.record.id.cmp(&b.record.id));
    Ok(out)
}
