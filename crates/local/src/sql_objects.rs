//! `Database`, `User` and `Grant` documents of a local manifest, carried
//! out by the control plane through the shared workflow
//! (`cnmysql_engine::sql_objects`) every few seconds. How each stands is
//! kept in `<state>/sql-objects.json` (with the document, so that one
//! taken out of the manifest is deleted as its `deletionPolicy` says);
//! `cnmysql local status` shows it. Passwords are files
//! `<secrets dir>/<Secret>/<key>`, as every Secret locally.

use std::collections::BTreeMap;
use std::time::Duration;

use cnmysql_api::backup::SecretKeyRef;
use cnmysql_api::sql_objects::SqlObjectDoc;
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_engine::sql_objects::{Outcome, Pass, Present, SqlObjectsPlatform, reconcile};
use serde::{Deserialize, Serialize};

use crate::state::StateDir;

/// How one object stands, as `<state>/sql-objects.json` keeps it.
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub ready: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_digest: Option<String>,
    /// The document as last seen (JSON).
    pub document: serde_json::Value,
}

fn path(dir: &StateDir) -> std::path::PathBuf {
    dir.root.join("sql-objects.json")
}

/// What `<state>/sql-objects.json` holds, by `Kind/name`.
pub fn records(dir: &StateDir) -> BTreeMap<String, Record> {
    std::fs::read_to_string(path(dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Carry the manifest's objects out every few seconds, until the process
/// ends.
pub async fn run(dir: StateDir) {
    let tick = move || {
        let dir = dir.clone();
        async move { tick(&dir).await }
    };
    crate::periodic::every(
        Duration::from_secs(3),
        "declared databases, users and grants",
        tick,
    )
    .await
}

fn document_of(d: &SqlObjectDoc) -> serde_json::Value {
    let v = match d {
        SqlObjectDoc::Database(x) => serde_json::to_value(x),
        SqlObjectDoc::User(x) => serde_json::to_value(x),
        SqlObjectDoc::Grant(x) => serde_json::to_value(x),
    };
    v.unwrap_or_default()
}

/// The documents by key, to tell a changed manifest.
pub fn documents(docs: &[SqlObjectDoc]) -> BTreeMap<String, serde_json::Value> {
    docs.iter().map(|d| (d.key(), document_of(d))).collect()
}

fn parse_record(key: &str, r: &Record) -> Option<SqlObjectDoc> {
    let kind = key.split('/').next()?;
    SqlObjectDoc::parse(kind, &r.document.to_string())?.ok()
}

async fn tick(dir: &StateDir) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(dir.manifest())?;
    let m = cnmysql_api::parse_manifest(&text)?;
    let cluster_name = m.cluster.metadata.name.clone().unwrap_or_default();
    let cluster_spec = m.cluster.spec.clone();
    let mut records = records(dir);
    if m.sql_objects.is_empty() && records.is_empty() {
        return Ok(());
    }
    let status = dir.read_status()?;
    let annotations = crate::annotations::read(dir)?.cluster;
    if cnmysql_core::sql_objects::on_hold(&status, &annotations) {
        return Ok(());
    }
    let keys: Vec<String> = m.sql_objects.iter().map(|d| d.key()).collect();
    let deleted = records
        .iter()
        .filter(|(k, _)| !keys.contains(k))
        .filter_map(|(k, r)| parse_record(k, r))
        .collect();
    let present = m
        .sql_objects
        .into_iter()
        .map(|doc| {
            let last = records.get(&doc.key()).map(|r| Outcome {
                ready: r.ready,
                message: r.message.clone(),
                password_digest: r.password_digest.clone(),
            });
            Present {
                doc,
                last: last.unwrap_or_default(),
            }
        })
        .collect();
    let digest_key = cnmysql_instance::bootstrap::read_secret(&dir.secret_files().admin_password)?;
    let mut platform = Local {
        dir,
        records: &mut records,
    };
    let pass = Pass {
        cluster: &cluster_name,
        spec: &cluster_spec,
        neighbours: Vec::new(),
        status: &status,
        present,
        deleted,
        digest_key,
    };
    reconcile(&mut platform, pass).await;
    cnmysql_tls::write_private(&path(dir), &serde_json::to_string_pretty(&records)?, false)?;
    Ok(())
}

/// The local platform of the workflow.
struct Local<'a> {
    dir: &'a StateDir,
    records: &'a mut BTreeMap<String, Record>,
}

impl SqlObjectsPlatform for Local<'_> {
    async fn client(&mut self) -> Result<ControlClient, String> {
        let material = self.dir.operator_material().map_err(|e| e.to_string())?;
        Ok(ControlClient::new(
            material.client_config().map_err(|e| e.to_string())?,
        ))
    }

    async fn address(&mut self, instance: &str) -> Result<Option<(String, u16)>, String> {
        let ports = self.dir.load_ports().map_err(|e| format!("{e:#}"))?;
        Ok(ports
            .instances
            .get(instance)
            .map(|p| (ports.host.clone(), p.control)))
    }

    async fn secret(&mut self, key: &SecretKeyRef) -> Result<String, String> {
        let p = crate::state::backup_secrets_dir()
            .join(&key.name)
            .join(&key.key);
        std::fs::read_to_string(&p)
            .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
            .map_err(|e| {
                format!(
                    "the Secret {} has no key {} ({}: {e})",
                    key.name,
                    key.key,
                    p.display()
                )
            })
    }

    async fn record(&mut self, doc: &SqlObjectDoc, outcome: &Outcome) {
        self.records.insert(
            doc.key(),
            Record {
                ready: outcome.ready,
                message: outcome.message.clone(),
                password_digest: outcome.password_digest.clone(),
                document: document_of(doc),
            },
        );
    }

    async fn forget(&mut self, doc: &SqlObjectDoc) {
        self.records.remove(&doc.key());
    }

    async fn event(&mut self, e: &Event) {
        self.dir
            .event(e.warning, e.reason, e.instance.as_deref(), &e.message);
    }
}
