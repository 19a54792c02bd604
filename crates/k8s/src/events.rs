//! Events (`events.k8s.io/v1`) on a Cluster, for `kubectl describe` and
//! `kubectl events`. Messages never carry secrets: they name instances,
//! phases and GTID positions only.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client, Resource, ResourceExt};

use cnmysql_api::Cluster;

/// Who reports: the operator, or the plugin acting for a person.
pub const PLUGIN_REPORTER: &str = "mysql.cnmysql.io/kubectl-cnmsql";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// Record an event on `cluster`. `action` is what was attempted
/// (`Switchover`, `Fence`), `reason` the outcome in one word.
pub async fn publish(
    client: &Client,
    cluster: &Cluster,
    reporter: &str,
    kind: Kind,
    action: &str,
    reason: &str,
    note: &str,
) -> kube::Result<Event> {
    let namespace = cluster.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let regarding = ObjectReference {
        api_version: Some(Cluster::api_version(&()).into_owned()),
        kind: Some(Cluster::kind(&()).into_owned()),
        name: Some(cluster.name_any()),
        namespace: Some(namespace.clone()),
        uid: cluster.meta().uid.clone(),
        resource_version: cluster.meta().resource_version.clone(),
        field_path: None,
    };
    let event = Event {
        metadata: ObjectMeta {
            // A generateName must itself be a valid name prefix: the API
            // server refuses one ending in a dot.
            generate_name: Some(format!("{}-", cluster.name_any())),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        type_: Some(
            match kind {
                Kind::Normal => "Normal",
                Kind::Warning => "Warning",
            }
            .into(),
        ),
        action: Some(action.into()),
        reason: Some(reason.into()),
        // The API limits a note to 1 kB.
        note: Some(truncate(note, 1024)),
        regarding: Some(regarding),
        reporting_controller: Some(reporter.into()),
        reporting_instance: Some(reporting_instance(reporter)),
        ..Default::default()
    };
    api.create(&PostParams::default(), &event).await
}

fn reporting_instance(reporter: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    truncate(&format!("{reporter}@{host}"), 128)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let t = truncate(&long, 1024);
        assert!(t.len() <= 1024);
        assert!(t.ends_with("..."));
        assert_eq!(truncate("short", 1024), "short");
    }
}
