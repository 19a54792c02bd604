//! An instance Pod's definition (`cnmysql_core::definition`, the one rule
//! for both platforms): the Pod carries the definition it was made from in
//! the `cnmysql.io/definition` annotation; when the Cluster's differs, the
//! instance is outdated and the rollout recreates it.
//!
//! The operator's own image is not part of it: a new operator is rolled out
//! by the instance-manager upgrade (in place or not), never by this.

use cnmysql_api::Cluster;
use cnmysql_core::definition::Definition;
use k8s_openapi::api::core::v1::Pod;

/// The annotation on an instance's Pod that records its definition.
pub const ANNOTATION: &str = "cnmysql.io/definition";

/// `instance`'s definition: its server image is the one an
/// annotation-driven upgrade pinned for it, if any.
pub fn of(cluster: &Cluster, instance: &str) -> Definition {
    Definition::of(
        &cluster.spec,
        super::image::instance_image(cluster, instance),
    )
}

/// As the annotation stores it.
pub fn encode(d: &Definition) -> String {
    serde_json::to_string(d).expect("a definition serialises")
}

/// What differs between the definition `pod` was made from and the
/// Cluster's (see `cnmysql_core::definition::outdated`); a Pod made before
/// the annotation existed is compared by its server image alone.
pub fn outdated(pod: &Pod, cluster: &Cluster) -> Option<String> {
    let instance = pod.metadata.name.as_deref()?;
    let mut have: serde_json::Map<String, serde_json::Value> = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    if !have.contains_key("image") {
        have.insert("image".into(), running_image(pod)?.into());
    }
    cnmysql_core::definition::outdated(&have, &of(cluster, instance))
}

/// The image of the Pod's server container.
fn running_image(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .find(|c| c.name == "mysql")
        .or(spec.containers.first())?
        .image
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::testutil::cluster;
    use crate::objects::{Environment, pod::pod};

    fn env(image: &str) -> Environment {
        Environment {
            operator_image: image.into(),
        }
    }

    #[test]
    fn a_pod_made_from_the_clusters_spec_is_up_to_date_whatever_the_operator_image() {
        let c = cluster("instances: 3\nmysql:\n  image: mariadb:10.11.8\n");
        let p = pod(&c, "db-1", &env("op:1"));
        assert_eq!(outdated(&p, &c), None);
        // A new operator renders the Pod with its own image: the same
        // definition (the manager upgrade handles that).
        let by_new_operator = pod(&c, "db-1", &env("op:2"));
        assert_ne!(p.spec, by_new_operator.spec);
        assert_eq!(p.metadata.annotations, by_new_operator.metadata.annotations);
    }

    #[test]
    fn a_new_server_image_or_resources_make_it_outdated_naming_what_changed() {
        let old = cluster("instances: 3\nmysql:\n  image: mariadb:10.11.8\n");
        let p = pod(&old, "db-2", &env("op:1"));
        let new = cluster("instances: 3\nmysql:\n  image: mariadb:10.11.9\n");
        assert_eq!(
            outdated(&p, &new).as_deref(),
            Some("image mariadb:10.11.8 → mariadb:10.11.9")
        );
        let more = cluster(
            "instances: 3\nmysql:\n  image: mariadb:10.11.8\nresources:\n  limits:\n    memory: 2Gi\n",
        );
        assert_eq!(
            outdated(&p, &more).as_deref(),
            Some("spec.resources changed")
        );
        let tuned = cluster(
            "instances: 3\nmysql:\n  image: mariadb:10.11.8\n  parameters:\n    max_connections: \"500\"\n",
        );
        assert_eq!(
            outdated(&p, &tuned).as_deref(),
            Some("spec.mysql.parameters changed")
        );
        // Only what the Pod recorded counts (an older operator's Pod).
        let mut older = p.clone();
        let ann = older.metadata.annotations.as_mut().unwrap();
        ann.insert(ANNOTATION.into(), r#"{"image":"mariadb:10.11.8"}"#.into());
        assert_eq!(outdated(&older, &more), None);
        // Scaling is not a change of definition.
        let scaled = cluster("instances: 5\nmysql:\n  image: mariadb:10.11.8\n");
        assert_eq!(outdated(&p, &scaled), None);
    }

    #[test]
    fn a_pod_without_the_annotation_is_compared_by_its_server_image() {
        let c = cluster("instances: 3\nmysql:\n  image: mariadb:10.11.8\n");
        let mut p = pod(&c, "db-1", &env("op:1"));
        p.metadata.annotations = None;
        assert_eq!(outdated(&p, &c), None);
        let new = cluster("instances: 3\nmysql:\n  image: mariadb:10.11.9\n");
        assert!(
            outdated(&p, &new)
                .unwrap()
                .starts_with("image mariadb:10.11.8")
        );
    }
}
