//! What of a Cluster's spec an instance is made from (its definition), and
//! what a change of the spec does to an instance: one rule for both
//! platforms. An instance whose recorded definition differs from the one
//! the Cluster asks for now is outdated, and the rollout
//! (`upgrade/rollout.rs`) recreates it, health-gated, one at a time, the
//! primary last after a switchover.
//!
//! The definition is the server image, the server settings
//! (`spec.mysql.parameters`, read by the manager when it starts), the
//! resources and the scheduling, and the Secrets the instance mounts. The
//! control plane's own executable is not part of it: a new one is rolled
//! out by the instance-manager upgrade (in place or not).

use serde::{Deserialize, Serialize};

use cnmysql_api::ClusterSpec;

/// Each field is named as in the Cluster's spec (`image` is
/// `spec.mysql.image` as resolved for the instance).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Definition {
    pub image: String,
    pub parameters: serde_json::Value,
    pub resources: serde_json::Value,
    pub affinity: serde_json::Value,
    pub secrets: serde_json::Value,
}

impl Definition {
    /// The definition `spec` asks for, on `image`.
    pub fn of(spec: &ClusterSpec, image: String) -> Definition {
        let value = |v: serde_json::Result<serde_json::Value>| v.unwrap_or_default();
        Definition {
            image,
            parameters: value(serde_json::to_value(&spec.mysql.parameters)),
            resources: value(serde_json::to_value(&spec.resources)),
            affinity: value(serde_json::to_value(&spec.affinity)),
            secrets: value(serde_json::to_value(&spec.secrets)),
        }
    }
}

/// What differs between the definition an instance was made from (`have`:
/// the fields it recorded) and `want`, in the user's terms; None when it is
/// up to date. Only what the instance recorded is compared: a field a
/// newer control plane added to the definition does not make every
/// instance outdated, and a platform records only what it acts on.
pub fn outdated(
    have: &serde_json::Map<String, serde_json::Value>,
    want: &Definition,
) -> Option<String> {
    let want = serde_json::to_value(want).ok()?;
    let mut changes = Vec::new();
    for (field, wanted) in want.as_object()? {
        let Some(had) = have.get(field) else {
            continue;
        };
        if had == wanted {
            continue;
        }
        changes.push(match (field.as_str(), had, wanted) {
            ("image", serde_json::Value::String(a), serde_json::Value::String(b)) => {
                format!("image {a} → {b}")
            }
            ("parameters", _, _) => "spec.mysql.parameters changed".to_string(),
            _ => format!("spec.{field} changed"),
        });
    }
    (!changes.is_empty()).then(|| changes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: serde_json::Value) -> ClusterSpec {
        serde_json::from_value(yaml).unwrap()
    }

    fn recorded(d: &Definition, only: &[&str]) -> serde_json::Map<String, serde_json::Value> {
        let all = serde_json::to_value(d).unwrap();
        let all = all.as_object().unwrap();
        only.iter()
            .map(|k| (k.to_string(), all[*k].clone()))
            .collect()
    }

    #[test]
    fn an_instance_is_outdated_by_what_it_recorded_and_says_what_changed() {
        let old = spec(serde_json::json!({"instances": 3}));
        let new = spec(serde_json::json!({
            "instances": 3,
            "mysql": {"parameters": {"max_connections": "500"}},
            "resources": {"limits": {"memory": "2Gi"}}
        }));
        let made = Definition::of(&old, "mariadb:10.11.8".into());
        let all = ["image", "parameters", "resources", "affinity", "secrets"];
        assert_eq!(
            outdated(
                &recorded(&made, &all),
                &Definition::of(&old, "mariadb:10.11.8".into())
            ),
            None
        );
        assert_eq!(
            outdated(
                &recorded(&made, &all),
                &Definition::of(&new, "mariadb:10.11.9".into())
            )
            .as_deref(),
            Some(
                "image mariadb:10.11.8 → mariadb:10.11.9, spec.mysql.parameters changed, spec.resources changed"
            )
        );
        // A platform that records only the image and the settings (local)
        // is not outdated by resources it does not apply.
        let local = recorded(&made, &["image", "parameters"]);
        let want = Definition::of(&new, "mariadb:10.11.8".into());
        assert_eq!(
            outdated(&local, &want).as_deref(),
            Some("spec.mysql.parameters changed")
        );
    }
}
