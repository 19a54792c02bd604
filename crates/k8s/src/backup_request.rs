//! `kubectl cnmsql backup`: ask for a base backup the way a user would
//! write one, a `Backup` object naming the Cluster, and follow it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use cnmysql_api::backup_resources::{
    Backup, BackupObjectStatus, BackupRequestSpec, BackupTarget, ClusterRef,
};
use kube::api::{Api, PostParams};

use crate::cluster_handle::ClusterHandle;

/// The Backup's name: the cluster's and the time, `<cluster>-YYYYMMDDhhmmss`.
pub fn backup_name(cluster: &str, now: jiff::Timestamp) -> String {
    format!("{cluster}-{}", now.strftime("%Y%m%d%H%M%S"))
}

/// Create the Backup of `h`'s Cluster (refused when the Cluster does not
/// exist or has no `spec.backup`); its name.
pub async fn request_backup(
    h: &ClusterHandle,
    name: Option<String>,
    target: BackupTarget,
) -> anyhow::Result<String> {
    let c = h.get().await?;
    if c.spec.backup.is_none() {
        anyhow::bail!(
            "cluster {} has no spec.backup: set spec.backup.objectStore first (docs/backups.md)",
            h.name()
        );
    }
    let name = name.unwrap_or_else(|| backup_name(h.name(), jiff::Timestamp::now()));
    let mut b = Backup::new(
        &name,
        BackupRequestSpec {
            cluster: ClusterRef {
                name: h.name().to_string(),
            },
            target,
        },
    );
    b.metadata.namespace = Some(h.namespace().to_string());
    let api: Api<Backup> = Api::namespaced(h.client().clone(), h.namespace());
    api.create(&PostParams::default(), &b)
        .await
        .with_context(|| format!("creating Backup {name}"))?;
    Ok(name)
}

/// Follow Backup `name` until it completes (its status) or fails (an
/// error naming why); `progress` is told each new line of progress.
pub async fn wait_for_backup(
    h: &ClusterHandle,
    name: &str,
    limit: Duration,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<BackupObjectStatus> {
    let api: Api<Backup> = Api::namespaced(h.client().clone(), h.namespace());
    let began = Instant::now();
    let mut last = String::new();
    loop {
        let st = api
            .get(name)
            .await
            .with_context(|| format!("reading Backup {name}"))?
            .status
            .unwrap_or_default();
        let line = [st.phase.as_str(), st.message.as_str(), st.progress.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(": ");
        if !line.is_empty() && line != last {
            progress(&line);
            last = line;
        }
        match st.phase.as_str() {
            "completed" => return Ok(st),
            "failed" => anyhow::bail!("Backup {name} failed: {}", st.error),
            _ => {}
        }
        if began.elapsed() > limit {
            anyhow::bail!(
                "Backup {name} is still {} after {}s (`kubectl get backup {name}` follows it)",
                if st.phase.is_empty() {
                    "waiting"
                } else {
                    &st.phase
                },
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_cluster_and_the_time() {
        let t: jiff::Timestamp = "2026-11-26T07:05:09Z".parse().unwrap();
        assert_eq!(backup_name("shop", t), "shop-20261126070509");
    }
}
