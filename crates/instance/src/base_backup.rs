//! Taking a base backup for the store: the chosen instance's manager
//! streams `mariadb-backup --stream=mbstream` (`GET /backup`, the same
//! stream a new replica clones from), and the stream goes into the store
//! compressed as it arrives (`cnmysql_backup::base_backup`). Both platforms
//! take backups through this one function.

use std::time::Duration;

use cnmysql_api::Flavor;
use cnmysql_backup::base_backup::{self, Manifest};
use cnmysql_backup::destination::Destination;
use futures::TryStreamExt;
use http_body_util::BodyExt;

use crate::client::ControlClient;

/// Take base backup `id` from `instance` (its control API at `host:port`)
/// into `dest`. The manifest says how it went; it is stored either way.
pub async fn take(
    client: &ControlClient,
    flavor: Flavor,
    host: &str,
    port: u16,
    instance: &str,
    id: &str,
    dest: &Destination,
) -> Manifest {
    let failed = |why: String| {
        let now = jiff::Timestamp::now().to_string();
        Manifest {
            record: cnmysql_api::backup::BackupRecord {
                id: id.to_string(),
                phase: "failed".into(),
                instance: instance.to_string(),
                started_at: now.clone(),
                stopped_at: now,
                error: why,
                ..Default::default()
            },
            flavor,
            format: String::new(),
            key: String::new(),
            sha256: String::new(),
            server_version: String::new(),
        }
    };
    let version = client
        .expecting(instance)
        .get_json::<cnmysql_core::status::InstanceStatus>(host, port, "/status")
        .await
        .map(|s| s.server_version)
        .unwrap_or_default();
    let resp = client
        .clone()
        .with_connect_timeout(Duration::from_secs(10))
        .expecting(instance)
        .send(host, port, "GET", "/backup", &[], None)
        .await;
    let resp = match resp {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            let status = r.status();
            let body = r
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let m = failed(format!(
                "{instance} refused the backup: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
            let _ = base_backup::write_manifest(dest, &m).await;
            return m;
        }
        Err(e) => {
            let m = failed(format!("{instance} cannot be reached: {e}"));
            let _ = base_backup::write_manifest(dest, &m).await;
            return m;
        }
    };
    let gtid = resp
        .headers()
        .get(crate::mysql_backup::GTID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp
        .into_body()
        .into_data_stream()
        .map_err(std::io::Error::other);
    match flavor {
        Flavor::Mariadb => {
            base_backup::store_mbstream(dest, id, instance, &version, Box::pin(body)).await
        }
        Flavor::Mysql => {
            base_backup::store_tar(dest, id, instance, &version, &gtid, Box::pin(body)).await
        }
    }
}
