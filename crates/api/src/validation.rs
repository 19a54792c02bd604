//! Reading and checking a `Cluster` manifest before anything is started.
//!
//! Three layers, each error naming the field and the fix:
//! 1. the manifest is walked against the CRD's own OpenAPI schema (unknown
//!    fields, wrong types, values outside an enum) — what `kubectl apply
//!    --validate=strict` would refuse;
//! 2. it is decoded into the typed [`Cluster`];
//! 3. the cross-field rules, which mirror the CRD's CEL rules one for one.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::field_error::err;
pub use crate::field_error::{FieldError, InvalidCluster};
pub use crate::quantity::quantity_bytes;
use crate::schema_check::check_against_schema;
pub use crate::schema_check::crd_schema;

use crate::cluster::{Cluster, OPERATOR_OWNED_PARAMETERS, ServiceRole};

/// Parse a YAML (or JSON) manifest and check it completely.
/// A manifest of several documents (separated by `---` lines): one
/// Cluster, and any ImageCatalog / ClusterImageCatalog it may name.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub cluster: Cluster,
    pub catalogs: Vec<crate::upgrade::CatalogDocument>,
    /// Base backups on a schedule (the local platform runs them).
    pub scheduled_backups: Vec<crate::backup_resources::ScheduledBackup>,
    /// Databases, users and grants declared on the Cluster.
    pub sql_objects: Vec<crate::sql_objects::SqlObjectDoc>,
}

/// Parse a manifest: exactly one Cluster (checked as [`parse_cluster`]
/// does) and image catalogs; errors name the document.
pub fn parse_manifest(text: &str) -> Result<Manifest, InvalidCluster> {
    let mut docs: Vec<String> = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else {
            let last = docs.last_mut().expect("one document");
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.retain(|d| {
        d.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    let mut cluster = None;
    let mut catalogs = Vec::new();
    let mut scheduled: Vec<(usize, crate::backup_resources::ScheduledBackup)> = Vec::new();
    let mut sql_objects = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let kind = serde_saphyr::from_str::<Value>(doc)
            .ok()
            .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_string));
        let at = |field: &str| format!("(document {}) {field}", i + 1);
        match kind.as_deref() {
            Some("ImageCatalog") | Some("ClusterImageCatalog") => {
                let parsed = if kind.as_deref() == Some("ImageCatalog") {
                    serde_saphyr::from_str(doc).map(crate::upgrade::CatalogDocument::Namespaced)
                } else {
                    serde_saphyr::from_str(doc).map(crate::upgrade::CatalogDocument::ClusterWide)
                };
                let parsed = parsed.map_err(|e| {
                    InvalidCluster(vec![err(
                        at("spec"),
                        format!("is not an image catalog: {e}"),
                    )])
                })?;
                // What the API server enforces on these (the list keyed by
                // version, the version's form).
                let mut seen = BTreeSet::new();
                for (n, image) in parsed.entries().1.iter().enumerate() {
                    let field = at(&format!("spec.images[{n}].version"));
                    if !is_version(&image.version) {
                        return Err(InvalidCluster(vec![err(
                            field,
                            format!(
                                "{:?} is not a server version; write it as major.minor.patch or major.minor",
                                image.version
                            ),
                        )]));
                    }
                    if !seen.insert(image.version.clone()) {
                        return Err(InvalidCluster(vec![err(
                            field,
                            format!("{} is listed twice; each version once", image.version),
                        )]));
                    }
                }
                catalogs.push(parsed);
            }
            Some(k) if let Some(parsed) = crate::sql_objects::SqlObjectDoc::parse(k, doc) => {
                let named = |e: FieldError| err(at(&e.field), e.message);
                let d = parsed.map_err(|e| InvalidCluster(e.into_iter().map(named).collect()))?;
                sql_objects.push((i, d));
            }
            Some("ScheduledBackup") => {
                let parsed = serde_saphyr::from_str(doc).map_err(|e| {
                    InvalidCluster(vec![err(
                        at("spec"),
                        format!("is not a ScheduledBackup: {e}"),
                    )])
                })?;
                scheduled.push((i, parsed));
            }
            _ if cluster.is_some() => {
                return Err(InvalidCluster(vec![err(
                    at("kind"),
                    "a second Cluster: a manifest holds one Cluster (and its image catalogs, scheduled backups, databases, users and grants)",
                )]));
            }
            _ => cluster = Some(parse_cluster(doc)?),
        }
    }
    let cluster = match cluster {
        Some(c) => c,
        None => parse_cluster("")?,
    };
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let clusters = scheduled
        .iter()
        .map(|(i, s)| (*i, s.spec.cluster.name.as_str()));
    let named = sql_objects.iter().map(|(i, d)| (*i, d.cluster()));
    for (i, of) in clusters.chain(named) {
        if of != name {
            return Err(InvalidCluster(vec![err(
                format!("(document {}) spec.cluster.name", i + 1),
                format!("{of:?} is not this manifest's Cluster; name {name:?}"),
            )]));
        }
    }
    Ok(Manifest {
        cluster,
        catalogs,
        scheduled_backups: scheduled.into_iter().map(|(_, s)| s).collect(),
        sql_objects: sql_objects.into_iter().map(|(_, d)| d).collect(),
    })
}

pub fn parse_cluster(text: &str) -> Result<Cluster, InvalidCluster> {
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| InvalidCluster(vec![err("(document)", format!("not valid YAML: {e}"))]))?;
    let mut errors = Vec::new();
    let given = |v: Option<&str>| match v {
        Some(v) => format!("is {v:?}"),
        None => "is missing".to_string(),
    };
    match value.get("apiVersion").and_then(Value::as_str) {
        Some("mysql.cnmysql.io/v1") => {}
        other => errors.push(err(
            "apiVersion",
            format!("{}; set it to mysql.cnmysql.io/v1", given(other)),
        )),
    }
    match value.get("kind").and_then(Value::as_str) {
        Some("Cluster") => {}
        other => errors.push(err("kind", format!("{}; set it to Cluster", given(other)))),
    }
    let schema = crd_schema();
    if let Some(spec) = value.get("spec") {
        let spec_schema = &schema["properties"]["spec"];
        check_against_schema(spec, spec_schema, "spec", &mut errors);
    } else {
        errors.push(err(
            "spec",
            "is missing; a Cluster needs at least spec.instances",
        ));
    }
    if let Some(obj) = value.as_object() {
        for k in obj.keys() {
            if !["apiVersion", "kind", "metadata", "spec", "status"].contains(&k.as_str()) {
                errors.push(err(k.clone(), "unknown top-level field; remove it"));
            }
        }
    }
    if !errors.is_empty() {
        return Err(InvalidCluster(errors));
    }
    let cluster: Cluster = serde_json::from_value(value)
        .map_err(|e| InvalidCluster(vec![err("(document)", e.to_string())]))?;
    let errors = validate(&cluster);
    if errors.is_empty() {
        Ok(cluster)
    } else {
        Err(InvalidCluster(errors))
    }
}

/// A name the API server takes as a DNS label (RFC 1123): a namespace, a
/// Cluster.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A Kubernetes object name (a DNS subdomain): it is also a directory
/// name under the local secrets directory, so never a path.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Names of Secrets the user brings.
fn check_secret_names(s: &crate::cluster::ClusterSpec, errors: &mut Vec<FieldError>) {
    let x = &s.secrets;
    for (field, name) in [
        ("spec.secrets.appSecret", &x.app_secret),
        ("spec.secrets.rootSecret", &x.root_secret),
        ("spec.secrets.caSecret", &x.ca_secret),
        ("spec.secrets.serverTlsSecret", &x.server_tls_secret),
    ] {
        if let Some(n) = name.as_deref().filter(|n| !is_dns_subdomain(n)) {
            errors.push(err(
                field,
                format!("{n:?} is not a Secret name: use lower-case letters, digits, '-' and '.'"),
            ));
        }
    }
}

/// Longest cluster name: `<name>-<ordinal>` and `<name>-primary` must stay
/// valid DNS labels with room for ordinals and suffixes.
pub const MAX_CLUSTER_NAME: usize = 45;

/// Fold a server setting name for comparison: `Server-ID` → `server_id`.
pub fn fold_parameter_name(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('-', "_")
}

/// Whether `v` is a server version as the API takes it: major.minor or
/// major.minor.patch, digits only.
pub fn is_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The server version, catalog, schedule and maintenance window.
fn check_upgrade_fields(s: &crate::cluster::ClusterSpec, errors: &mut Vec<FieldError>) {
    let m = &s.mysql;
    if let Some(v) = &m.version
        && !is_version(v)
    {
        errors.push(err(
            "spec.mysql.version",
            format!("{v:?} is not a server version; write it as major.minor.patch (10.11.19) or major.minor (9.7)"),
        ));
    }
    if m.image.is_some() && m.image_catalog_ref.is_some() {
        errors.push(err(
            "spec.mysql.imageCatalogRef",
            "and spec.mysql.image name the image two ways: keep one",
        ));
    }
    if m.image_catalog_ref.is_some() && m.version.is_none() {
        errors.push(err(
            "spec.mysql.version",
            "is needed with spec.mysql.imageCatalogRef: the version to look up in the catalog",
        ));
    }
    if let Some(at) = &m.upgrade_at
        && at.parse::<jiff::Timestamp>().is_err()
    {
        errors.push(err(
            "spec.mysql.upgradeAt",
            format!("{at:?} is not an RFC 3339 time; write it like 2026-12-01T02:00:00Z"),
        ));
    }
    if let Some(w) = &s.maintenance_window {
        if let Err(e) = w.start_minute() {
            errors.push(err("spec.maintenanceWindow.start", e));
        }
        if let Err(e) = w.minutes() {
            errors.push(err("spec.maintenanceWindow.duration", e));
        }
        let mut days = w.days.clone();
        days.sort();
        days.dedup();
        if days.len() != w.days.len() {
            errors.push(err(
                "spec.maintenanceWindow.days",
                "lists a day twice; remove the duplicate",
            ));
        }
    }
}

/// A retention policy: a whole number and a unit (`h`, `d`, `w`), as
/// seconds.
pub fn retention_seconds(p: &str) -> Option<u64> {
    let (n, unit) = p.split_at(p.len().checked_sub(1)?);
    let n: u64 = n.parse().ok().filter(|n| *n > 0)?;
    let per = match unit {
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(per)
}

fn check_store(field: &str, o: &crate::backup::ObjectStore, errors: &mut Vec<FieldError>) {
    let p = &o.destination_path;
    if !["s3://", "gs://", "azure://", "file:///"]
        .iter()
        .any(|s| p.starts_with(s))
    {
        errors.push(err(
            format!("{field}.destinationPath"),
            format!("{p:?} is not a store path; write it as s3://bucket/prefix, gs://bucket/prefix, azure://container/prefix or file:///directory"),
        ));
    }
    if let Some(n) = &o.server_name
        && (n.is_empty() || n.contains('/'))
    {
        errors.push(err(
            format!("{field}.serverName"),
            format!("{n:?} must be a folder name, without /"),
        ));
    }
}

fn check_backup_fields(s: &crate::cluster::ClusterSpec, errors: &mut Vec<FieldError>) {
    if let Some(b) = &s.backup {
        check_store("spec.backup.objectStore", &b.object_store, errors);
        if let Some(r) = &b.retention_policy
            && retention_seconds(r).is_none()
        {
            errors.push(err(
                "spec.backup.retentionPolicy",
                format!("{r:?} is not a retention; write a number and a unit: 30d, 4w or 12h"),
            ));
        }
    }
    let Some(rec) = s.recovery() else {
        return;
    };
    let field = "spec.bootstrap.recovery.source.objectStore";
    match (&rec.source.object_store, &rec.source.backup) {
        (Some(store), None) => {
            check_store(field, store, errors);
            if store.server_name.is_none() {
                errors.push(err(
                    format!("{field}.serverName"),
                    "is needed: the name of the Cluster whose backups to recover from",
                ));
            }
        }
        (None, Some(b)) => {
            if b.name.is_empty() {
                errors.push(err(
                    "spec.bootstrap.recovery.source.backup.name",
                    "is empty: name a completed Backup object of this namespace",
                ));
            }
            if rec.source.backup_id.is_some() {
                errors.push(err(
                    "spec.bootstrap.recovery.source.backupId",
                    "goes with objectStore: the Backup object names its own base backup; remove backupId",
                ));
            }
        }
        (Some(_), Some(_)) => errors.push(err(
            "spec.bootstrap.recovery.source",
            "names both an objectStore and a backup: keep one",
        )),
        (None, None) => errors.push(err(
            "spec.bootstrap.recovery.source",
            "names no backups: set objectStore (with serverName), or backup.name (a Backup object on Kubernetes)",
        )),
    }
    if let Some(t) = &rec.recovery_target {
        let set = t.targets_set();
        if set > 1 {
            errors.push(err(
                "spec.bootstrap.recovery.recoveryTarget",
                "sets more than one of targetTime, targetGTID and targetImmediate: keep one",
            ));
        }
        if let Some(at) = &t.target_time
            && at.parse::<jiff::Timestamp>().is_err()
        {
            errors.push(err(
                "spec.bootstrap.recovery.recoveryTarget.targetTime",
                format!("{at:?} is not an RFC 3339 time; write it like 2026-11-24T20:15:00Z"),
            ));
        }
    }
}

/// `instances` and the synchronous replica counts, against each other.
fn check_instance_counts(s: &crate::cluster::ClusterSpec, errors: &mut Vec<FieldError>) {
    if s.instances < 1 {
        errors.push(err(
            "spec.instances",
            format!("is {}; it must be at least 1", s.instances),
        ));
    }
    if s.min_sync_replicas < 0 {
        errors.push(err("spec.minSyncReplicas", "must not be negative"));
    }
    if s.max_sync_replicas < 0 {
        errors.push(err("spec.maxSyncReplicas", "must not be negative"));
    }
    if s.min_sync_replicas > s.max_sync_replicas {
        errors.push(err(
            "spec.minSyncReplicas",
            format!(
                "({}) must not exceed spec.maxSyncReplicas ({}): lower minSyncReplicas or raise maxSyncReplicas",
                s.min_sync_replicas, s.max_sync_replicas
            ),
        ));
    }
    if s.max_sync_replicas >= s.instances && s.instances >= 1 {
        errors.push(err(
            "spec.maxSyncReplicas",
            format!(
                "({}) must be lower than spec.instances ({}): a primary cannot wait for itself; lower maxSyncReplicas or add instances",
                s.max_sync_replicas, s.instances
            ),
        ));
    }
}

pub fn validate(c: &Cluster) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let s = &c.spec;
    match c.metadata.name.as_deref() {
        None | Some("") => errors.push(err("metadata.name", "is missing; name the cluster")),
        Some(n) if !is_dns_label(n) || n.len() > MAX_CLUSTER_NAME => errors.push(err(
            "metadata.name",
            format!("{n:?} must be a lower-case DNS label (a-z, 0-9, -) of at most {MAX_CLUSTER_NAME} characters"),
        )),
        _ => {}
    }
    check_backup_fields(s, &mut errors);
    check_instance_counts(s, &mut errors);
    crate::replica::check_spec(s, &mut errors);
    s.managed.adopt.check(&mut errors);
    crate::import::check_spec(s, &mut errors);
    crate::storage::check_spec(&s.storage, &mut errors);
    check_secret_names(s, &mut errors);
    let semi = &s.mysql.semi_sync;
    if semi.enabled && s.max_sync_replicas < 1 {
        errors.push(err(
            "spec.mysql.semiSync.enabled",
            "needs at least one synchronous replica: set spec.maxSyncReplicas to 1 or more",
        ));
    }
    if semi.enabled
        && semi.data_durability == crate::cluster::DataDurability::Required
        && s.min_sync_replicas < 1
    {
        errors.push(err(
            "spec.minSyncReplicas",
            "must be 1 or more with spec.mysql.semiSync.dataDurability: required",
        ));
    }
    if semi.timeout_millis < 1 {
        errors.push(err(
            "spec.mysql.semiSync.timeoutMillis",
            "must be at least 1",
        ));
    }
    if !(0..=31_536_000).contains(&s.mysql.binlog_retention_seconds) {
        errors.push(err(
            "spec.mysql.binlogRetentionSeconds",
            format!(
                "is {}; use 0 to 31536000 seconds (a year)",
                s.mysql.binlog_retention_seconds
            ),
        ));
    }
    if s.failover_delay < 0 {
        errors.push(err(
            "spec.failoverDelay",
            format!("is {}; use 0 or more seconds", s.failover_delay),
        ));
    }
    if s.max_replica_lag_seconds < 0 {
        errors.push(err(
            "spec.maxReplicaLagSeconds",
            format!(
                "is {}; use 0 (no limit) or more seconds",
                s.max_replica_lag_seconds
            ),
        ));
    }
    if let Some(l) = s.secrets.certificate_lifetime_seconds.filter(|l| *l < 60) {
        errors.push(err(
            "spec.secrets.certificateLifetimeSeconds",
            format!("is {l}; use at least 60 seconds, or leave it out for 90 days"),
        ));
    }
    if s.max_switchover_delay < 0 {
        errors.push(err(
            "spec.maxSwitchoverDelay",
            format!("is {}; use 0 or more seconds", s.max_switchover_delay),
        ));
    }
    for (k, v) in &s.mysql.parameters {
        let field = format!("spec.mysql.parameters.{k}");
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            errors.push(err(
                field,
                "is not a server setting name (letters, digits, _ . -)",
            ));
        } else if OPERATOR_OWNED_PARAMETERS.contains(&fold_parameter_name(k).as_str()) {
            errors.push(err(
                field,
                "is owned by the operator and cannot be set; remove it (semi-sync is configured with spec.mysql.semiSync)",
            ));
        } else if v.contains('\n') || v.contains('\r') {
            errors.push(err(field, "must be a single line"));
        }
    }
    check_upgrade_fields(s, &mut errors);
    let svc = &s.managed.services;
    let mut seen = BTreeSet::new();
    for (i, role) in svc.disabled_default_services.iter().enumerate() {
        let field = format!("spec.managed.services.disabledDefaultServices[{i}]");
        if *role == ServiceRole::Rw {
            errors.push(err(
                field.clone(),
                "rw cannot be disabled: the read-write Service is always created; remove it",
            ));
        }
        if !seen.insert(*role) {
            errors.push(err(
                field,
                format!("{} is listed twice; remove the duplicate", role.as_str()),
            ));
        }
    }
    let mut names = BTreeSet::new();
    let cluster_len = c.metadata.name.as_deref().map_or(0, str::len);
    for (i, a) in svc.additional.iter().enumerate() {
        let field = format!("spec.managed.services.additional[{i}].name");
        if ["rw", "ro", "r"].contains(&a.name.as_str()) {
            errors.push(err(
                field.clone(),
                format!(
                    "{:?} collides with a default Service; pick another name",
                    a.name
                ),
            ));
        } else if !is_dns_label(&a.name) || a.name.len() > 40 || cluster_len + 1 + a.name.len() > 63
        {
            errors.push(err(
                field.clone(),
                format!(
                    "{:?} must be a lower-case DNS label of at most 40 characters, and <cluster>-<name> at most 63",
                    a.name
                ),
            ));
        }
        if !names.insert(a.name.as_str()) {
            errors.push(err(
                field,
                format!(
                    "{:?} is used twice; additional Service names must be unique",
                    a.name
                ),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod certificate_tests;
#[cfg(test)]
mod header_tests;
#[cfg(test)]
mod parameter_tests;
