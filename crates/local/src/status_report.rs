//! `cnmysql local status`: the cluster status and what each instance
//! answers now, as JSON or as the status view shared with the plugin.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use cnmysql_control::client::ControlClient;
use cnmysql_core::status::InstanceStatus;

use crate::state::{StateDir, live_pid};

/// The cluster as `local status` shows it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub cluster: String,
    pub state_dir: PathBuf,
    pub running: bool,
    pub endpoints: std::collections::BTreeMap<String, String>,
    /// The Prometheus endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    pub status: cnmysql_api::ClusterStatus,
    /// Why the recorded status could not be read (the instances are still
    /// shown as they answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_error: Option<String>,
    pub instances: Vec<InstanceReport>,
    /// The cluster's annotations (`cnmysql local annotate CLUSTER`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// How each declared database, user and grant stands, by `Kind/name`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sql_objects: std::collections::BTreeMap<String, ObjectReport>,
}

/// A declared database, user or grant in `local status`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    pub ready: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceReport {
    pub name: String,
    pub reachable: bool,
    /// Its annotations (`cnmysql local annotate`, and the control plane's
    /// `cnmysql.io/upgrade-*` mirrors).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    #[serde(flatten)]
    pub status: Option<InstanceStatus>,
}

pub async fn status_report(dir: &StateDir) -> anyhow::Result<StatusReport> {
    let cluster = dir.load_cluster()?;
    let (status, status_error) = match dir.read_status() {
        Ok(s) => (s, None),
        Err(e) => (Default::default(), Some(format!("{e:#}"))),
    };
    let ports = dir.load_ports()?;
    let client = ControlClient::new(dir.operator_material()?.client_config()?)
        .with_connect_timeout(Duration::from_millis(800));
    let annotations = crate::annotations::read(dir).unwrap_or_default();
    let mut instances = Vec::new();
    for (name, p) in &ports.instances {
        let st = tokio::time::timeout(
            Duration::from_secs(3),
            client.get_json::<InstanceStatus>(&ports.host, p.control, "/status"),
        )
        .await
        .ok()
        .and_then(Result::ok);
        instances.push(InstanceReport {
            annotations: annotations.of(Some(name)),
            name: name.clone(),
            reachable: st.is_some(),
            status: st,
        });
    }
    instances.sort_by_key(|i| {
        cnmysql_api::names::ordinal_of(cluster.metadata.name.as_deref().unwrap_or(""), &i.name)
    });
    Ok(StatusReport {
        cluster: cluster.metadata.name.unwrap_or_default(),
        state_dir: dir.root.clone(),
        running: live_pid(&dir.control_pid()).is_some(),
        endpoints: ports
            .services
            .iter()
            .map(|(k, v)| (k.clone(), format!("{}:{v}", ports.host)))
            .collect(),
        metrics: ports
            .metrics
            .map(|p| format!("http://{}:{p}/metrics", ports.host)),
        status,
        status_error,
        instances,
        annotations: annotations.of(None),
        sql_objects: crate::sql_objects::records(dir)
            .into_iter()
            .map(|(k, r)| {
                let report = ObjectReport {
                    ready: r.ready,
                    message: r.message,
                };
                (k, report)
            })
            .collect(),
    })
}

/// `cnmysql local status`: the status view (the same table as `kubectl
/// cnmsql status`), refined with what each instance answers now; colours
/// only on a terminal.
pub fn render_status(r: &StatusReport) -> String {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let declared = r.instances.len() as i32;
    let mut view = cnmysql_view::status_table::View::from_status(&r.cluster, declared, &r.status);
    view.place = if r.running { "running" } else { "stopped" }.into();
    view.status_error = r.status_error.clone();
    let eps: Vec<String> = r
        .endpoints
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    view.extra.push(("Services".into(), eps.join("  ")));
    if let Some(m) = &r.metrics {
        view.extra.push(("Metrics".into(), m.clone()));
    }
    if !r.sql_objects.is_empty() {
        let ready = r.sql_objects.values().filter(|o| o.ready).count();
        let mut line = format!("{ready} of {} ready", r.sql_objects.len());
        for (k, o) in r.sql_objects.iter().filter(|(_, o)| !o.ready) {
            line.push_str(&format!("; {k}: {}", o.message));
        }
        view.extra.push(("Declared".into(), line));
    }
    for i in &r.instances {
        view.refine(&i.name, i.status.as_ref());
    }
    view.render(color)
}

/// A fresh snapshot of the cluster, as the control plane sees it.
pub async fn snapshot(dir: &StateDir) -> anyhow::Result<cnmysql_core::status::Snapshot> {
    let cluster = dir.load_cluster()?;
    let report = status_report(dir).await?;
    if let Some(e) = report.status_error {
        anyhow::bail!("the cluster status cannot be read: {e}");
    }
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let instances = report
        .instances
        .into_iter()
        .map(|i| cnmysql_core::status::Observed {
            ordinal: cnmysql_api::names::ordinal_of(&name, &i.name).unwrap_or(0),
            name: i.name,
            status: i.status,
            outdated: None,
        })
        .collect();
    Ok(cnmysql_core::status::Snapshot {
        cluster: name,
        spec: cluster.spec,
        status: report.status,
        instances,
        now_ms: jiff::Timestamp::now().as_millisecond(),
        declared: Default::default(),
    })
}
