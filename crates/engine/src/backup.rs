//! One base backup, the same on every platform: open the store the
//! Cluster names, pick the instances to take it from, most suitable first
//! (`cnmysql_core::backup_source`), stream it from the first that serves it
//! into the store (`cnmysql_control::base_backup::take`), record it in the
//! cluster status, apply the retention policy (which moves the first
//! recoverability point), and say how it went in one Event
//! (`BackupCompleted`, `BackupFailed`, and `BackupsPruned` when retention
//! deleted something).
//!
//! A platform ([`BackupPlatform`]) only opens its store, says where each
//! manager answers, writes status and events, and shows progress: the
//! local `cnmysql local backup` and its schedules, and the operator's
//! `Backup` objects, take every backup through [`take`].

use std::future::Future;
use std::time::{Duration, Instant};

use cnmysql_api::backup_resources::BackupTarget;
use cnmysql_api::{Cluster, ClusterStatus};
use cnmysql_backup::destination::Destination;
use cnmysql_backup::retention::Pruned;
use cnmysql_control::base_backup::{Source, Taken};
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::status::CloneProgress;
use cnmysql_core::status_change::StatusChange;

/// What a platform provides to the backup workflow.
pub trait BackupPlatform {
    /// The store the Cluster's `spec.backup` names, opened with the
    /// secrets it names; an error naming the field and the fix.
    fn destination(&mut self) -> impl Future<Output = Result<Destination, String>> + Send;

    /// A client of the instances' control APIs (the cluster's mTLS).
    fn client(&mut self) -> impl Future<Output = Result<ControlClient, String>> + Send;

    /// Where `instance`'s control API answers now; None when it has no
    /// address (no Pod IP, no port).
    fn address(
        &mut self,
        instance: &str,
    ) -> impl Future<Output = Result<Option<(String, u16)>, String>> + Send;

    /// Apply `change` to the cluster status.
    fn change_status(
        &mut self,
        change: &StatusChange,
    ) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Record an event (and tell whoever watches).
    fn record(&mut self, event: &Event) -> impl Future<Output = ()> + Send;

    /// Backup `id` into `dest` begins, from `source` first.
    fn started(
        &mut self,
        id: &str,
        dest: &Destination,
        source: &Source,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// How far the backup is (every few seconds while it streams).
    fn progress(&self, progress: CloneProgress) -> impl Future<Output = ()> + Send;
}

/// A backup asked for.
pub struct Request<'a> {
    pub cluster: &'a Cluster,
    /// The cluster status as now observed (who is primary, who is ready).
    pub status: &'a ClusterStatus,
    pub target: BackupTarget,
    /// The name a user knows it by (a `Backup` object's), if any.
    pub name: Option<&'a str>,
    /// How often progress is reported.
    pub every: Duration,
}

/// How a backup that began went.
pub struct Outcome {
    pub id: String,
    pub taken: Taken,
    /// What the retention policy deleted after it.
    pub pruned: Option<Pruned>,
    /// Why retention was not applied, when it failed (the backup stands).
    pub retention_error: Option<String>,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn completed(&self) -> bool {
        self.taken.manifest.completed()
    }
}

/// Take one base backup (see the module). `Err` when it could not begin
/// (no store, no primary, no instance with an address); an `Outcome`
/// whose backup failed otherwise. Either way the Event is recorded.
pub async fn take(p: &mut impl BackupPlatform, r: &Request<'_>) -> Result<Outcome, String> {
    let began = Instant::now();
    let out: Result<Outcome, String> = async {
        let (client, dest, sources, id) = begin(p, r).await?;
        let taken = stream(p, r, &client, &dest, &sources, &id).await;
        Ok(finish(p, r, &dest, id, taken, began).await)
    }
    .await;
    let event = match &out {
        Ok(o) => outcome_event(r.name, o),
        Err(why) => Event::new(true, "BackupFailed", None, label_failed(r.name, None, why)),
    };
    p.record(&event).await;
    out
}

/// The store, the client, the sources in order, and the new backup's id;
/// the platform is told the backup began.
async fn begin(
    p: &mut impl BackupPlatform,
    r: &Request<'_>,
) -> Result<(ControlClient, Destination, Vec<Source>, String), String> {
    let dest = p.destination().await?;
    let flavor = r.cluster.spec.mysql.flavor;
    let chosen = cnmysql_core::backup_source::sources(r.target, flavor, r.status)?;
    let mut sources = Vec::new();
    for s in chosen {
        if let Some((host, port)) = p.address(&s.instance).await? {
            sources.push(Source {
                instance: s.instance,
                host,
                port,
                why: s.why,
            });
        }
    }
    let first = sources
        .first()
        .ok_or("no instance of the cluster has an address to back up from")?;
    let client = p.client().await?;
    let id = cnmysql_backup::base_backup::new_id(jiff::Timestamp::now());
    p.started(&id, &dest, first).await?;
    Ok((client, dest, sources, id))
}

async fn stream(
    p: &impl BackupPlatform,
    r: &Request<'_>,
    client: &ControlClient,
    dest: &Destination,
    sources: &[Source],
    id: &str,
) -> Taken {
    let flavor = r.cluster.spec.mysql.flavor;
    cnmysql_control::base_backup::take(client, flavor, sources, id, dest, r.every, |progress| {
        p.progress(progress)
    })
    .await
}

/// Record the backup in the status; after a completed one, apply the
/// retention policy.
async fn finish(
    p: &mut impl BackupPlatform,
    r: &Request<'_>,
    dest: &Destination,
    id: String,
    taken: Taken,
    began: Instant,
) -> Outcome {
    let record = taken.manifest.record.clone();
    if let Err(e) = p
        .change_status(&StatusChange::BackupTaken(Box::new(record)))
        .await
    {
        tracing::warn!(backup = %id, error = %e, "the backup is not recorded in the status");
    }
    let policy = r
        .cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.retention_policy.clone());
    let (mut pruned, mut retention_error) = (None, None);
    if let (true, Some(policy)) = (taken.manifest.completed(), policy) {
        let flavor = r.cluster.spec.mysql.flavor;
        match retain(p, dest, flavor, &policy, jiff::Timestamp::now()).await {
            Ok(p) => pruned = Some(p),
            Err(e) => {
                tracing::warn!(backup = %id, error = %e, "retention not applied");
                retention_error = Some(format!("{e:#}"));
            }
        }
    }
    Outcome {
        id,
        taken,
        pruned,
        retention_error,
        elapsed: began.elapsed(),
    }
}

/// Apply retention `policy` as of `now`: delete the base backups older
/// than it (never the newest) and the binlog runs no kept backup needs;
/// when something went, the first recoverability point moves to the
/// oldest kept backup and `BackupsPruned` says what went.
pub async fn retain(
    p: &mut impl BackupPlatform,
    dest: &Destination,
    flavor: cnmysql_api::Flavor,
    policy: &str,
    now: jiff::Timestamp,
) -> anyhow::Result<Pruned> {
    let (pruned, first) =
        cnmysql_backup::retention::apply(dest, flavor, policy, now.as_microsecond()).await?;
    if pruned.is_empty() {
        return Ok(pruned);
    }
    p.change_status(&StatusChange::FirstRecoverabilityPoint(first))
        .await?;
    let event = Event::new(false, "BackupsPruned", None, pruned.describe(policy));
    p.record(&event).await;
    Ok(pruned)
}

/// `backup nightly (20261126…) of db-2` or `base backup 20261126… of db-2`.
fn label(name: Option<&str>, id: &str, instance: &str) -> String {
    match name {
        Some(n) => format!("backup {n} ({id}) of {instance}"),
        None => format!("base backup {id} of {instance}"),
    }
}

fn label_failed(name: Option<&str>, id_of: Option<(&str, &str)>, why: &str) -> String {
    match id_of {
        Some((id, instance)) => format!("{} failed: {why}", label(name, id, instance)),
        None => match name {
            Some(n) => format!("backup {n} failed: {why}"),
            None => format!("base backup failed: {why}"),
        },
    }
}

/// The Event that says how a backup that began went.
fn outcome_event(name: Option<&str>, o: &Outcome) -> Event {
    let rec = &o.taken.manifest.record;
    let from = Some(rec.instance.as_str());
    if o.completed() {
        let text = format!(
            "{}: {} bytes stored as {}, consistent with {} ({})",
            label(name, &o.id, &rec.instance),
            rec.raw_bytes,
            rec.stored_bytes,
            rec.gtid,
            o.taken.message
        );
        Event::new(false, "BackupCompleted", from, text)
    } else {
        let text = label_failed(name, Some((&o.id, &rec.instance)), &rec.error);
        Event::new(true, "BackupFailed", from, text)
    }
}
