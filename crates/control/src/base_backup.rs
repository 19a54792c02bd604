//! Taking a base backup for the store: the chosen instance's manager
//! streams its physical copy (`GET /backup`, the same stream a new replica
//! clones from: `mariadb-backup --stream=mbstream`, or MySQL's clone as
//! tar), and the stream goes into the store compressed as it arrives
//! (`cnmysql_backup::base_backup`). Both platforms take backups through
//! this one function, from the instances `cnmysql_core::backup_source`
//! names, in its order.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use cnmysql_backup::base_backup::{self, Manifest};
use cnmysql_backup::destination::Destination;
use cnmysql_core::status::CloneProgress;
use futures::TryStreamExt;
use http_body_util::BodyExt;

use crate::client::ControlClient;

/// An instance to take the backup from: where its control API listens,
/// and why it was chosen.
#[derive(Clone, Debug)]
pub struct Source {
    pub instance: String,
    pub host: String,
    pub port: u16,
    pub why: String,
}

/// How a backup went, and from which instance and why.
pub struct Taken {
    pub manifest: Manifest,
    /// Why the instance it came from was chosen, and which refused first.
    pub message: String,
}

/// Take base backup `id` from the first of `sources` that serves it into
/// `dest`. An instance that refuses or cannot be reached before its stream
/// begins gives way to the next; a stream that breaks fails the backup.
/// The manifest says how it went; it is stored either way. Every `every`,
/// `report` is given the progress so far (bytes read, the instance's data
/// size, rate and time left).
pub async fn take<F, Fut>(
    client: &ControlClient,
    flavor: Flavor,
    sources: &[Source],
    id: &str,
    dest: &Destination,
    every: Duration,
    mut report: F,
) -> Taken
where
    F: FnMut(CloneProgress) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let progress: Arc<Mutex<Option<CloneProgress>>> = Arc::default();
    let work = take_quietly(client, flavor, sources, id, dest, progress.clone());
    tokio::pin!(work);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            taken = &mut work => return taken,
            _ = tick.tick() => {
                let p = progress.lock().expect("progress lock").clone();
                if let Some(p) = p.filter(|p| p.bytes > 0) {
                    report(p).await;
                }
            }
        }
    }
}

async fn take_quietly(
    client: &ControlClient,
    flavor: Flavor,
    sources: &[Source],
    id: &str,
    dest: &Destination,
    progress: Arc<Mutex<Option<CloneProgress>>>,
) -> Taken {
    let failed = |instance: &str, why: String| {
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
    let mut refusals: Vec<String> = Vec::new();
    for s in sources {
        let version = client
            .expecting(&s.instance)
            .get_json::<cnmysql_core::status::InstanceStatus>(
                &s.host,
                s.port,
                crate::contract::STATUS,
            )
            .await
            .map(|st| st.server_version)
            .unwrap_or_default();
        let resp = client
            .clone()
            .with_connect_timeout(Duration::from_secs(10))
            .expecting(&s.instance)
            .send(&s.host, s.port, "GET", crate::contract::BACKUP, &[], None)
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
                refusals.push(format!(
                    "{} refused: {status}: {}",
                    s.instance,
                    String::from_utf8_lossy(&body).trim()
                ));
                continue;
            }
            Err(e) => {
                refusals.push(format!("{} cannot be reached: {e}", s.instance));
                continue;
            }
        };
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let gtid = header(crate::contract::GTID_HEADER);
        let expected = header(crate::contract::SIZE_HEADER).parse::<u64>().ok();
        let started = Instant::now();
        let mut read = 0u64;
        let cell = progress.clone();
        let source = s.instance.clone();
        let body = resp
            .into_body()
            .into_data_stream()
            .map_err(std::io::Error::other)
            .inspect_ok(move |chunk| {
                read += chunk.len() as u64;
                let secs = started.elapsed().as_secs_f64();
                let rate = if secs > 0.0 { read as f64 / secs } else { 0.0 };
                *cell.lock().expect("progress lock") = Some(CloneProgress {
                    source: source.clone(),
                    bytes: read,
                    bytes_per_second: rate,
                    expected_bytes: expected,
                    eta_seconds: expected
                        .filter(|_| rate > 0.0)
                        .map(|e| e.saturating_sub(read) as f64 / rate),
                    elapsed_seconds: secs,
                    stage: "backup".into(),
                });
            });
        let manifest = match flavor {
            Flavor::Mariadb => {
                base_backup::store_mbstream(dest, id, &s.instance, &version, Box::pin(body)).await
            }
            Flavor::Mysql => {
                base_backup::store_tar(dest, id, &s.instance, &version, &gtid, Box::pin(body)).await
            }
        };
        refusals.push(format!("taken on {}: {}", s.instance, s.why));
        return Taken {
            manifest,
            message: refusals.join("; "),
        };
    }
    let who = sources.last().map(|s| s.instance.as_str()).unwrap_or("");
    let why = if refusals.is_empty() {
        "no instance to take it from".to_string()
    } else {
        refusals.join("; ")
    };
    let m = failed(who, why.clone());
    let _ = base_backup::write_manifest(dest, &m).await;
    Taken {
        manifest: m,
        message: why,
    }
}
