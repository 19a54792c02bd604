//! Growing the instances' claims when the Cluster asks for more storage
//! (`spec.storage.size`, or the request of `spec.storage.pvcTemplate`).
//!
//! One claim at a time, replicas first and the primary last, each only once
//! the one before has its new capacity: a storage driver that fails part
//! way leaves one instance to look at, not all. Claims never shrink, and a
//! class that does not allow expansion is not asked: both are refused with
//! the field to change. The decision ([`plan`]) is a pure function of what
//! the claims and their classes say; [`carry_out`] reads them and patches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use cnmysql_api::Cluster;
use cnmysql_api::validation::quantity_bytes;

use crate::context::Context;

/// One claim as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    pub name: String,
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
    /// Every claim holds what is asked.
    Nothing,
    /// Asked for something that cannot be done: why, naming the field.
    Refused(String),
    /// A claim is growing; the next waits.
    Waiting(String),
    /// Ask for more on this claim.
    Expand { claim: String, to: String },
}

/// The field that sets the size, for messages.
pub fn size_field(cluster: &Cluster) -> &'static str {
    let templated = cluster
        .spec
        .storage
        .pvc_template
        .as_ref()
        .and_then(|t| t.resources.as_ref()?.requests.as_ref()?.get("storage"))
        .is_some();
    if templated {
        "spec.storage.pvcTemplate.resources.requests.storage"
    } else {
        "spec.storage.size"
    }
}

/// The decision. `want` is the size asked for; `expandable` says, per
/// class name, whether it allows expansion (absent: unknown, not asked);
/// `primary` goes last.
pub fn plan(
    field: &str,
    want: &str,
    claims: &[ClaimView],
    expandable: &BTreeMap<String, bool>,
    primary: Option<&str>,
) -> Growth {
    let Some(want_bytes) = quantity_bytes(want) else {
        return Growth::Refused(format!("{field} is {want:?}, not a storage quantity"));
    };
    if let Some(c) = claims.iter().find(|c| c.requested.1 > want_bytes) {
        return Growth::Refused(format!(
            "{field} is {want}, less than the {} claim {} holds: claims cannot shrink; set it back to {} or more",
            c.requested.0, c.name, c.requested.0
        ));
    }
    if let Some(c) = claims
        .iter()
        .find(|c| c.capacity.is_some_and(|cap| cap < c.requested.1))
    {
        let how = if c.file_system_pending {
            "its volume has grown; the kubelet grows the file system when the Pod next starts"
        } else {
            "waiting for the storage driver"
        };
        return Growth::Waiting(format!(
            "claim {} is growing to {} ({how}); the next claim waits",
            c.name, c.requested.0
        ));
    }
    let mut short: Vec<&ClaimView> = claims
        .iter()
        .filter(|c| c.requested.1 < want_bytes)
        .collect();
    short.sort_by_key(|c| (Some(c.name.as_str()) == primary, c.name.clone()));
    let Some(next) = short.first() else {
        return Growth::Nothing;
    };
    let class = next.class.clone().unwrap_or_default();
    match expandable.get(&class) {
        Some(true) => Growth::Expand {
            claim: next.name.clone(),
            to: want.to_string(),
        },
        Some(false) => Growth::Refused(format!(
            "{field} asks for {want} but StorageClass {class:?} of claim {} does not allow volume expansion: set {field} back to {}, or set allowVolumeExpansion: true on the class if its driver can grow volumes",
            next.name, next.requested.0
        )),
        None => Growth::Refused(format!(
            "{field} asks for {want} but claim {} has no StorageClass the operator can read ({class:?}), so whether it can grow is unknown: set {field} back to {}",
            next.name, next.requested.0
        )),
    }
}

fn view(c: &PersistentVolumeClaim) -> Option<ClaimView> {
    let spec = c.spec.as_ref()?;
    let requested = spec
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?
        .0
        .clone();
    let bytes = quantity_bytes(&requested)?;
    let status = c.status.as_ref();
    let capacity = status
        .and_then(|s| s.capacity.as_ref()?.get("storage"))
        .and_then(|q| quantity_bytes(&q.0));
    let file_system_pending = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "FileSystemResizePending" && c.status == "True")
        });
    Some(ClaimView {
        name: c.name_any(),
        requested: (requested, bytes),
        capacity,
        class: spec.storage_class_name.clone(),
        file_system_pending,
    })
}

/// Read the claims' classes, decide, and ask for more on the next claim.
/// Returns the decision (the status reports it).
pub async fn carry_out(
    cluster: &Cluster,
    ctx: &Context,
    ns: &str,
    claims: &[PersistentVolumeClaim],
) -> anyhow::Result<Growth> {
    use crate::objects::storage::{self, BINLOG_SUFFIX};
    let size = |c: Option<PersistentVolumeClaim>| {
        c.and_then(|c| {
            c.spec?
                .resources?
                .requests?
                .get("storage")
                .map(|q| q.0.clone())
        })
    };
    let views: Vec<ClaimView> = claims.iter().filter_map(view).collect();
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    let mut expandable = BTreeMap::new();
    for class in views.iter().filter_map(|v| v.class.clone()) {
        if let Some(sc) = classes.get_opt(&class).await? {
            expandable.insert(class, sc.allow_volume_expansion == Some(true));
        }
    }
    let primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone());
    // The data claims first, then the binary logs' (the primary's last in
    // both).
    let (logs, data): (Vec<ClaimView>, Vec<ClaimView>) = views
        .into_iter()
        .partition(|v| v.name.ends_with(BINLOG_SUFFIX));
    let data_size = size(Some(storage::claim(cluster, "x"))).unwrap_or_default();
    let mut growth = plan(
        size_field(cluster),
        &data_size,
        &data,
        &expandable,
        primary.as_deref(),
    );
    if growth == Growth::Nothing
        && let Some(want) = size(storage::binlog_claim(cluster, "x"))
    {
        let primary_log = primary.as_ref().map(|p| format!("{p}{BINLOG_SUFFIX}"));
        growth = plan(
            "spec.storage.binlogs.size",
            &want,
            &logs,
            &expandable,
            primary_log.as_deref(),
        );
    }
    if let Growth::Expand { claim, to } = &growth {
        tracing::info!(claim, to, "asking for a larger volume");
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": to}}}});
        api.patch(claim, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        crate::events::publish(
            ctx,
            cluster,
            cnmysql_k8s::events::Kind::Normal,
            "ExpandVolume",
            "StorageExpanding",
            &format!("claim {claim} asked to grow to {to}"),
        )
        .await;
    }
    if let Growth::Refused(why) = &growth {
        let said = cluster
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION))
            .is_some_and(|c| &c.message == why);
        if !said {
            tracing::warn!(reason = %why, "storage growth refused");
            crate::events::publish(
                ctx,
                cluster,
                cnmysql_k8s::events::Kind::Warning,
                "ExpandVolume",
                "StorageExpansionRefused",
                why,
            )
            .await;
        }
    }
    Ok(growth)
}

/// The Cluster condition that reports it.
pub const CONDITION: &str = "StorageExpanding";

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u128 = 1 << 30;

    fn claim(name: &str, gi: u128, capacity: Option<u128>) -> ClaimView {
        ClaimView {
            name: name.into(),
            requested: (format!("{gi}Gi"), gi * GI),
            capacity: capacity.map(|c| c * GI),
            class: Some("fast".into()),
            file_system_pending: false,
        }
    }

    fn classes(allow: bool) -> BTreeMap<String, bool> {
        BTreeMap::from([("fast".to_string(), allow)])
    }

    const F: &str = "spec.storage.size";

    #[test]
    fn claims_grow_one_at_a_time_replicas_first_then_the_primary() {
        let all = |a, b, c| {
            vec![
                claim("db-1", a, Some(a)),
                claim("db-2", b, Some(b)),
                claim("db-3", c, Some(c)),
            ]
        };
        let next = |claims: &[ClaimView]| plan(F, "2Gi", claims, &classes(true), Some("db-1"));
        let expand = |c: &str| Growth::Expand {
            claim: c.into(),
            to: "2Gi".into(),
        };
        assert_eq!(next(&all(1, 1, 1)), expand("db-2"));
        assert_eq!(next(&all(1, 2, 1)), expand("db-3"));
        assert_eq!(next(&all(1, 2, 2)), expand("db-1"));
        assert_eq!(next(&all(2, 2, 2)), Growth::Nothing);
        // Asked, not yet grown: the next waits.
        let growing = vec![
            claim("db-1", 1, Some(1)),
            claim("db-2", 2, Some(1)),
            claim("db-3", 1, Some(1)),
        ];
        let Growth::Waiting(why) = next(&growing) else {
            panic!()
        };
        assert!(why.contains("claim db-2 is growing to 2Gi"), "{why}");
    }

    #[test]
    fn shrinking_and_a_class_that_cannot_grow_are_refused_naming_the_field() {
        let claims = vec![claim("db-1", 2, Some(2)), claim("db-2", 2, Some(2))];
        let Growth::Refused(why) = plan(F, "1Gi", &claims, &classes(true), None) else {
            panic!()
        };
        assert!(why.contains("spec.storage.size is 1Gi, less than the 2Gi claim db-1 holds: claims cannot shrink; set it back to 2Gi"), "{why}");
        let Growth::Refused(why) = plan(F, "3Gi", &claims, &classes(false), None) else {
            panic!()
        };
        assert!(why.contains("StorageClass \"fast\" of claim db-1 does not allow volume expansion: set spec.storage.size back to 2Gi"), "{why}");
        let Growth::Refused(why) = plan(F, "3Gi", &claims, &BTreeMap::new(), None) else {
            panic!()
        };
        assert!(
            why.contains("no StorageClass the operator can read"),
            "{why}"
        );
        assert_eq!(
            plan(F, "2Gi", &claims, &classes(false), None),
            Growth::Nothing
        );
    }
}
