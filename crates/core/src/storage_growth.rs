//! Growing the instances' claims: when the Cluster asks for more
//! (`spec.storage.size`, `spec.storage.binlogs.size`, or the request of
//! `spec.storage.pvcTemplate`), and before they fill when the Cluster has
//! a policy (`autoGrow`: once any instance's volume passes `usedPercent`,
//! every claim of that volume is raised by `increment`, up to `maximum`).
//!
//! One claim at a time, replicas first and the primary last, each only once
//! the one before has its new capacity (and the policy's next step only
//! [`SETTLE_MS`] after its last, so it reads grown file systems): a
//! storage driver that fails part way leaves one instance to look at, not
//! all, and every instance keeps the same room, so a switchover or a
//! failover never lands on a smaller volume. Claims never shrink, and a
//! class that does not allow expansion is not asked: both are refused with
//! the field to change. A pure function of what the claims, their classes
//! and the instances' measured volumes say; the platform reads them and
//! patches (Kubernetes). The local platform's directories cannot grow: it
//! reports their use and nothing decides there.

use std::collections::BTreeMap;

use cnmysql_api::VolumeUsage;
use cnmysql_api::storage::{AutoGrowSpec, Increment};
use cnmysql_api::validation::quantity_bytes;

/// One claim as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    pub name: String,
    /// The instance it belongs to.
    pub instance: String,
    /// What its spec requests, as written and in bytes.
    pub requested: (String, u128),
    /// What the volume holds now (`status.capacity`), in bytes.
    pub capacity: Option<u128>,
    pub class: Option<String>,
    /// The kubelet must grow the file system (`FileSystemResizePending`).
    pub file_system_pending: bool,
}

/// What to do about the claims now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Growth {
    /// Every claim holds what is asked, and none needs to grow.
    Nothing,
    /// Asked for something that cannot be done: why, naming the field.
    Refused(String),
    /// A claim is growing; the next waits.
    Waiting(String),
    /// Ask for more on this claim; `why` says what asked.
    Expand {
        claim: String,
        to: String,
        why: String,
    },
    /// The policy would grow the volume but its claims are at its
    /// maximum: a warning for a person.
    AtMaximum(String),
}

/// One volume kind's claims and what asks for their size.
pub struct VolumeClaims<'a> {
    /// `data` or `binlogs`, for messages.
    pub volume: &'a str,
    /// The field that sets the size, and the size it asks for.
    pub field: &'a str,
    pub want: &'a str,
    pub claims: &'a [ClaimView],
    /// The policy, with its field (`spec.storage.autoGrow`).
    pub auto_grow: Option<(&'a str, &'a AutoGrowSpec)>,
    /// Each instance's measured volume of this kind.
    pub usage: &'a BTreeMap<String, VolumeUsage>,
    /// When the last claim of this kind was asked to grow, and now (ms).
    pub last_step_ms: Option<i64>,
    pub now_ms: i64,
    /// Writes are refused for want of room (`status.writesRefused`): the
    /// policy grows until the disk guard takes them again.
    pub writes_refused: bool,
}

/// The policy takes no step within this long of its last one: the
/// instances' measurements the decision reads (the Cluster status) may
/// still be of the file system before it grew.
pub const SETTLE_MS: i64 = 10_000;

/// The decision for one volume kind. `expandable` says, per class name,
/// whether it allows expansion (absent: unknown, not asked); `primary`
/// goes last.
pub fn plan(
    v: &VolumeClaims,
    expandable: &BTreeMap<String, bool>,
    primary: Option<&str>,
) -> Growth {
    let Some(want_bytes) = quantity_bytes(v.want) else {
        return Growth::Refused(format!(
            "{} is {:?}, not a storage quantity",
            v.field, v.want
        ));
    };
    if v.auto_grow.is_none()
        && let Some(c) = v.claims.iter().find(|c| c.requested.1 > want_bytes)
    {
        return Growth::Refused(format!(
            "{} is {}, less than the {} claim {} holds: claims cannot shrink; set it back to {} or more",
            v.field, v.want, c.requested.0, c.name, c.requested.0
        ));
    }
    if let Some(wait) = growing(v) {
        return Growth::Waiting(wait);
    }
    let (target, why) = match target(v, want_bytes) {
        Ok(t) => t,
        Err(at_maximum) => return at_maximum,
    };
    let mut short: Vec<&ClaimView> = v
        .claims
        .iter()
        .filter(|c| c.requested.1 < target.1)
        .collect();
    short.sort_by_key(|c| (Some(c.instance.as_str()) == primary, c.name.clone()));
    let Some(next) = short.first() else {
        return Growth::Nothing;
    };
    let field = v.auto_grow.map_or(v.field, |(f, _)| f);
    let class = next.class.clone().unwrap_or_default();
    match expandable.get(&class) {
        Some(true) => Growth::Expand {
            claim: next.name.clone(),
            to: target.0,
            why,
        },
        Some(false) => Growth::Refused(format!(
            "{why}, but StorageClass {class:?} of claim {} does not allow volume expansion: set allowVolumeExpansion: true on the class if its driver can grow volumes, or take back {field}",
            next.name
        )),
        None => Growth::Refused(format!(
            "{why}, but claim {} has no StorageClass the operator can read ({class:?}), so whether it can grow is unknown: take back {field}",
            next.name
        )),
    }
}

/// A claim asked to grow that has not yet.
fn growing(v: &VolumeClaims) -> Option<String> {
    for c in v.claims {
        if c.capacity.is_some_and(|cap| cap < c.requested.1) {
            let how = if c.file_system_pending {
                "its volume has grown; the kubelet grows the file system when the Pod next starts"
            } else {
                "waiting for the storage driver"
            };
            return Some(format!(
                "claim {} is growing to {} ({how}); the next claim waits",
                c.name, c.requested.0
            ));
        }
    }
    None
}

/// The size every claim of the volume should have, as text and bytes, and
/// what asks for it; `Err` when the policy is at its maximum or waits.
fn target(v: &VolumeClaims, want_bytes: u128) -> Result<((String, u128), String), Growth> {
    let asked = (
        (v.want.to_string(), want_bytes),
        format!("{} asks for {}", v.field, v.want),
    );
    let Some((field, policy)) = v.auto_grow else {
        return Ok(asked);
    };
    // With a policy, claims may hold more than the field asks: the largest
    // is what every claim is brought to.
    let top = v.claims.iter().map(|c| c.requested.1).max().unwrap_or(0);
    let current = if top > want_bytes {
        (
            (quantity(top), top),
            format!(
                "{field}'s step: every {} claim to {}",
                v.volume,
                quantity(top)
            ),
        )
    } else {
        asked
    };
    let settled = v.claims.iter().all(|c| c.requested.1 == current.0.1);
    let full = v
        .usage
        .iter()
        .filter(|(i, u)| {
            // Past the threshold, or so full that the disk guard refuses
            // writes (on a small volume its reserve comes first).
            u.used_percent() >= u64::from(policy.used_percent)
                || crate::disk_guard::short(i, std::slice::from_ref(*u), v.writes_refused).is_some()
        })
        .max_by_key(|(_, u)| u.used_percent());
    let (Some((instance, use_)), true) = (full, settled) else {
        return Ok(current);
    };
    if let Some(t) = v.last_step_ms
        && v.now_ms.saturating_sub(t) < SETTLE_MS
    {
        return Err(Growth::Waiting(format!(
            "instance {instance}'s {} volume is {}% full; the next step waits until the measurements are of the grown file systems",
            v.volume,
            use_.used_percent()
        )));
    }
    let Some(max) = quantity_bytes(&policy.maximum) else {
        return Ok(current);
    };
    let base = current.0.1;
    if base >= max {
        return Err(Growth::AtMaximum(format!(
            "instance {instance}'s {} volume is {}% full, past {field}.usedPercent ({}%), and its claims are at {field}.maximum ({}): raise the maximum, or free space (docs/storage.md)",
            v.volume,
            use_.used_percent(),
            policy.used_percent,
            policy.maximum
        )));
    }
    let step = match policy.increment() {
        Some(Increment::Bytes(b)) => b,
        Some(Increment::Percent(p)) => base * u128::from(p) / 100,
        None => return Ok(current),
    };
    // Whole MiB, at least one.
    let next = (base + step.max(1)).div_ceil(MI) * MI;
    let next = next.min(max);
    Ok((
        (quantity(next), next),
        format!(
            "instance {instance}'s {} volume is {}% full, past {field}.usedPercent ({}%): every {} claim grows to {}",
            v.volume,
            use_.used_percent(),
            policy.used_percent,
            v.volume,
            quantity(next)
        ),
    ))
}

const MI: u128 = 1 << 20;

/// Bytes as a quantity a claim takes: `5Gi`, `1280Mi`, or plain bytes.
pub fn quantity(bytes: u128) -> String {
    const GI: u128 = 1 << 30;
    if bytes > 0 && bytes.is_multiple_of(GI) {
        format!("{}Gi", bytes / GI)
    } else if bytes > 0 && bytes.is_multiple_of(MI) {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

#[cfg(test)]
mod tests;
