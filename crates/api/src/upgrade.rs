//! Server version upgrades: the image catalogs that map versions to images
//! (`ImageCatalog`, namespaced, and `ClusterImageCatalog`), the maintenance
//! window every rollout keeps to, and the per-version upgrade history the
//! status records.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::flavor::Flavor;

/// Versions to images, for one flavour, in one namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "ImageCatalog",
    namespaced,
    printcolumn = r#"{"name":"Flavor","type":"string","jsonPath":".spec.flavor"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageCatalogSpec {
    /// The flavour of every image listed.
    pub flavor: Flavor,
    /// One entry per server version.
    /// Each version once (the API server keeps the list keyed by version).
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    pub images: Vec<CatalogImage>,
}

/// Versions to images, for one flavour, for every namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "ClusterImageCatalog",
    printcolumn = r#"{"name":"Flavor","type":"string","jsonPath":".spec.flavor"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterImageCatalogSpec {
    /// The flavour of every image listed.
    pub flavor: Flavor,
    /// One entry per server version.
    /// Each version once (the API server keeps the list keyed by version).
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    pub images: Vec<CatalogImage>,
}

/// An image catalog of either scope, as a manifest holds it.
#[derive(Clone, Debug)]
pub enum CatalogDocument {
    Namespaced(ImageCatalog),
    ClusterWide(ClusterImageCatalog),
}

impl CatalogDocument {
    pub fn kind(&self) -> CatalogKind {
        match self {
            CatalogDocument::Namespaced(_) => CatalogKind::ImageCatalog,
            CatalogDocument::ClusterWide(_) => CatalogKind::ClusterImageCatalog,
        }
    }
    pub fn name(&self) -> &str {
        match self {
            CatalogDocument::Namespaced(c) => c.metadata.name.as_deref().unwrap_or_default(),
            CatalogDocument::ClusterWide(c) => c.metadata.name.as_deref().unwrap_or_default(),
        }
    }
    /// (flavour, images)
    pub fn entries(&self) -> (Flavor, &[CatalogImage]) {
        match self {
            CatalogDocument::Namespaced(c) => (c.spec.flavor, &c.spec.images),
            CatalogDocument::ClusterWide(c) => (c.spec.flavor, &c.spec.images),
        }
    }
}

/// One server version and the image that holds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogImage {
    /// The server version the image holds, as the server states it
    /// (major.minor.patch, or major.minor).
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"), length(max = 20))]
    pub version: String,
    /// The image.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
}

/// The catalog `spec.mysql.version` is looked up in.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageCatalogRef {
    /// `ImageCatalog` (in the Cluster's namespace) or `ClusterImageCatalog`.
    #[serde(default)]
    pub kind: CatalogKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CatalogKind {
    #[default]
    ImageCatalog,
    ClusterImageCatalog,
}

impl CatalogKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogKind::ImageCatalog => "ImageCatalog",
            CatalogKind::ClusterImageCatalog => "ClusterImageCatalog",
        }
    }
}

/// When rollouts may restart instances: on the listed days (UTC), from
/// `start` for `duration`. A rollout of any kind (server version, Pod
/// definition, instance manager) moves only inside the window; one that
/// reaches its end stops between instances and goes on at the next.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceWindow {
    /// Days the window opens (UTC); empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    pub days: Vec<Weekday>,
    /// Opening time, `HH:MM` UTC.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub start: String,
    /// How long it stays open: hours and minutes, like `4h`, `90m` or
    /// `1h30m` (at most 24h).
    #[schemars(regex(pattern = r"^([0-9]+h)?([0-9]+m)?$"))]
    pub duration: String,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Weekday {
    /// Monday = 0.
    pub fn index(self) -> i64 {
        self as i64
    }
}

impl MaintenanceWindow {
    /// The duration in minutes, or why it is not one.
    pub fn minutes(&self) -> Result<i64, String> {
        let d = self.duration.trim();
        let mut total = 0i64;
        let mut num = String::new();
        let mut any = false;
        for c in d.chars() {
            match c {
                '0'..='9' => num.push(c),
                'h' | 'm' if !num.is_empty() => {
                    let n: i64 = num.parse().map_err(|_| "too large".to_string())?;
                    total += if c == 'h' { n * 60 } else { n };
                    num.clear();
                    any = true;
                }
                _ => {
                    return Err(format!(
                        "{d:?} is not a duration; write it like 4h, 90m or 1h30m"
                    ));
                }
            }
        }
        if !any || !num.is_empty() {
            return Err(format!(
                "{d:?} is not a duration; write it like 4h, 90m or 1h30m"
            ));
        }
        if !(1..=24 * 60).contains(&total) {
            return Err(format!("{d:?} must be between 1m and 24h"));
        }
        Ok(total)
    }

    /// Minutes after midnight UTC the window opens.
    pub fn start_minute(&self) -> Result<i64, String> {
        let bad = || {
            format!(
                "{:?} is not a time of day; write it as HH:MM (UTC)",
                self.start
            )
        };
        let (h, m) = self.start.split_once(':').ok_or_else(bad)?;
        let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if !(0..24).contains(&h) || !(0..60).contains(&m) || self.start.len() != 5 {
            return Err(bad());
        }
        Ok(h * 60 + m)
    }
}

/// Where the upgrade to one version stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradePhase {
    /// Declared; not yet checked.
    New,
    /// Accepted, waiting for its time, the maintenance window or a healthy
    /// cluster.
    Pending,
    /// Instances are being moved to it.
    Upgrading,
    /// Every instance runs it.
    Upgraded,
    /// Refused, or a step failed; see the conditions.
    Failed,
}

impl UpgradePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradePhase::New => "New",
            UpgradePhase::Pending => "Pending",
            UpgradePhase::Upgrading => "Upgrading",
            UpgradePhase::Upgraded => "Upgraded",
            UpgradePhase::Failed => "Failed",
        }
    }
}

/// The upgrade to one server version: its phase and one condition per step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRecord {
    pub version: String,
    /// The image that holds it.
    pub image: String,
    /// The version the cluster ran when this upgrade was declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    pub phase: UpgradePhase,
    /// When its first step started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it reached Upgraded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_time: Option<String>,
    /// One per step, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<UpgradeCondition>,
}

/// One upgrade step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeCondition {
    /// `Validation`, `PreHealthCheck`, `UpgradeReplica`, `Switchover`,
    /// `UpgradeFormerPrimary`, `PostUpgrade` or `PostHealthCheck`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The instance the step is about, for the per-instance steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// `True` (done), `False` (failed) or `Unknown` (not yet).
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: &str, duration: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            days: vec![],
            start: start.into(),
            duration: duration.into(),
        }
    }

    #[test]
    fn durations_and_start_times_parse_or_say_how_to_write_them() {
        assert_eq!(window("02:00", "4h").minutes(), Ok(240));
        assert_eq!(window("02:00", "1h30m").minutes(), Ok(90));
        assert_eq!(window("02:00", "90m").minutes(), Ok(90));
        assert!(
            window("02:00", "4")
                .minutes()
                .unwrap_err()
                .contains("like 4h")
        );
        assert!(
            window("02:00", "25h")
                .minutes()
                .unwrap_err()
                .contains("24h")
        );
        assert!(window("02:00", "").minutes().is_err());
        assert_eq!(window("23:59", "1m").start_minute(), Ok(23 * 60 + 59));
        assert!(window("24:00", "1m").start_minute().is_err());
        assert!(window("2:00", "1m").start_minute().is_err());
    }
}
