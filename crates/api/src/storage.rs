//! Each instance's volumes (`spec.storage`): the data claim, the binary
//! logs' own claim when asked, and the policy that grows them before they
//! fill (`autoGrow`). The decision to grow is the core's
//! (`cnmysql_core::storage_growth`); docs/storage.md says how to size.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field_error::{FieldError, err};
use crate::quantity::{is_storage_quantity, quantity_bytes};

/// Storage for each instance's data directory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageSpec {
    /// Requested size, e.g. `10Gi` [default: 1Gi]. Ignored when `pvcTemplate`
    /// sets a storage request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub size: Option<String>,
    /// StorageClass of the claims [default: the cluster's default class].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class: Option<String>,
    /// A full claim spec, for access modes, selectors or volume modes; `size`
    /// and `storageClass` fill in what it leaves unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_template: Option<k8s_openapi::api::core::v1::PersistentVolumeClaimSpec>,
    /// A volume of its own for each instance's binary logs, so that a burst
    /// of writes filling the logs cannot fill the data volume, and each can
    /// be sized and grown apart. Set when the Cluster is made: it cannot be
    /// added or removed later (the server's history lives in those logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlogs: Option<BinlogStorageSpec>,
    /// Grow the data claims before they fill (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_grow: Option<AutoGrowSpec>,
    /// Keep the claims of instances removed by lowering `spec.instances`
    /// (they are deleted by default; scaling up again then clones afresh).
    #[serde(default)]
    pub retain_on_scale_down: bool,
}

/// The binary logs' volume: claim `<instance>-binlog`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BinlogStorageSpec {
    /// Requested size, e.g. `5Gi` [default: 1Gi]; raising it grows the
    /// claims as `spec.storage.size` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub size: Option<String>,
    /// StorageClass of the claims [default: that of the data claims].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class: Option<String>,
    /// Grow the binary logs' claims before they fill (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_grow: Option<AutoGrowSpec>,
}

/// Grow a volume's claims before they fill: when any instance's volume
/// passes `usedPercent`, every claim of that volume is raised by
/// `increment`, one instance at a time, replicas first, never past
/// `maximum`. Needs a StorageClass that allows expansion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoGrowSpec {
    /// Grow once a volume is this full, in percent of what the server can
    /// use [default: 80; 50 to 95].
    #[serde(default = "default_used_percent")]
    #[schemars(range(min = 50, max = 95))]
    pub used_percent: u8,
    /// What each step adds: a size (`5Gi`) or a share of the claim
    /// (`25%`) [default: 25%].
    #[serde(default = "default_increment")]
    #[schemars(length(max = 64))]
    pub increment: String,
    /// The claims never grow past this size; once there, a warning says
    /// so and the volume is left to the alerts and to a person.
    #[schemars(length(max = 64))]
    pub maximum: String,
}

fn default_used_percent() -> u8 {
    80
}

fn default_increment() -> String {
    "25%".into()
}

/// What one step adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Increment {
    Bytes(u128),
    /// Percent of the claim's size.
    Percent(u32),
}

impl AutoGrowSpec {
    /// The increment, read; None when it is neither a size nor `1%`–`100%`.
    pub fn increment(&self) -> Option<Increment> {
        if let Some(p) = self.increment.strip_suffix('%') {
            return p
                .parse::<u32>()
                .ok()
                .filter(|p| (1..=100).contains(p))
                .map(Increment::Percent);
        }
        quantity_bytes(&self.increment).map(Increment::Bytes)
    }

    fn check(&self, field: &str, size: Option<&str>, errors: &mut Vec<FieldError>) {
        if !(50..=95).contains(&self.used_percent) {
            errors.push(err(
                format!("{field}.usedPercent"),
                format!("{} is outside 50 to 95: below, volumes grow while half empty; above, a burst fills the rest before the claim has grown", self.used_percent),
            ));
        }
        if self.increment().is_none() {
            errors.push(err(
                format!("{field}.increment"),
                format!(
                    "{:?} is neither a size (5Gi) nor a share of the claim (1% to 100%, like 25%)",
                    self.increment
                ),
            ));
        }
        let Some(max) = quantity_bytes(&self.maximum) else {
            errors.push(err(
                format!("{field}.maximum"),
                format!(
                    "{:?} is not a storage size; write it like 100Gi",
                    self.maximum
                ),
            ));
            return;
        };
        if let Some(size) = size
            && quantity_bytes(size).is_some_and(|s| max < s)
        {
            errors.push(err(
                format!("{field}.maximum"),
                format!("{} is less than the size asked for ({size}): raise it, or the claims could never grow", self.maximum),
            ));
        }
    }
}

/// The storage fields' own rules (`spec.storage`).
pub(crate) fn check_spec(st: &StorageSpec, errors: &mut Vec<FieldError>) {
    let quantity = |field: &str, size: &str, errors: &mut Vec<FieldError>| {
        if !is_storage_quantity(size) {
            errors.push(err(
                field,
                format!("{size:?} is not a storage size; write it like 10Gi, 500Mi or 1Ti"),
            ));
        }
    };
    if let Some(size) = &st.size {
        quantity("spec.storage.size", size, errors);
    }
    if let Some(g) = &st.auto_grow {
        g.check(
            "spec.storage.autoGrow",
            Some(st.size.as_deref().unwrap_or("1Gi")),
            errors,
        );
    }
    if let Some(b) = &st.binlogs {
        if let Some(size) = &b.size {
            quantity("spec.storage.binlogs.size", size, errors);
        }
        if let Some(g) = &b.auto_grow {
            g.check(
                "spec.storage.binlogs.autoGrow",
                Some(b.size.as_deref().unwrap_or("1Gi")),
                errors,
            );
        }
    }
}

#[cfg(test)]
mod tests;
