//! Growing the instances' claims, the Kubernetes side: read the claims,
//! their classes and the instances' measured volumes (the Cluster status),
//! ask the core (`cnmysql_core::storage_growth`), patch the one claim it
//! names, and say so (an Event, and `status.volumeGrowth`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use cnmysql_api::validation::quantity_bytes;
use cnmysql_api::{Cluster, VolumeUsage};
use cnmysql_core::storage_growth::{ClaimView, Growth, VolumeClaims, plan};

use crate::context::Context;

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

fn view(c: &PersistentVolumeClaim) -> Option<ClaimView> {
    use crate::objects::storage::claim_instance;
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
    let name = c.name_any();
    Some(ClaimView {
        instance: claim_instance(&name).to_string(),
        name,
        requested: (requested, bytes),
        capacity,
        class: spec.storage_class_name.clone(),
        file_system_pending,
    })
}

/// Each instance's measured `volume` (`data`, `binlogs`), as the Cluster
/// status last reported it.
fn usage(cluster: &Cluster, volume: &str) -> BTreeMap<String, VolumeUsage> {
    let Some(st) = &cluster.status else {
        return BTreeMap::new();
    };
    st.instance_states
        .iter()
        .filter_map(|(name, s)| {
            let v = s.volumes.iter().find(|v| v.volume == volume)?;
            Some((name.clone(), v.clone()))
        })
        .collect()
}

/// When a claim of the kind (`logs`: the binary logs') was last asked to
/// grow (`status.volumeGrowth`).
fn last_step_ms(cluster: &Cluster, logs: bool) -> Option<i64> {
    use crate::objects::storage::BINLOG_SUFFIX;
    let st = cluster.status.as_ref()?;
    st.volume_growth
        .iter()
        .rev()
        .find(|s| s.claim.ends_with(BINLOG_SUFFIX) == logs)
        .and_then(|s| cnmysql_core::time::parse_ms(&s.time))
}

/// The size a claim's spec asks for.
fn requested(c: Option<PersistentVolumeClaim>) -> Option<String> {
    c.and_then(|c| {
        c.spec?
            .resources?
            .requests?
            .get("storage")
            .map(|q| q.0.clone())
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
    let views: Vec<ClaimView> = claims.iter().filter_map(view).collect();
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    let mut expandable = BTreeMap::new();
    // Each class once (the instances' claims usually share one).
    let names: std::collections::BTreeSet<String> =
        views.iter().filter_map(|v| v.class.clone()).collect();
    for class in names {
        if let Some(sc) = classes.get_opt(&class).await? {
            expandable.insert(class, sc.allow_volume_expansion == Some(true));
        }
    }
    let growth = decide(cluster, &views, &expandable);
    if let Growth::Expand { claim, to, why } = &growth {
        tracing::info!(claim, to, reason = %why, "asking for a larger volume");
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
            &format!("claim {claim} asked to grow to {to}: {why}"),
        )
        .await;
    }
    let warning = match &growth {
        Growth::Refused(why) => Some(("StorageExpansionRefused", why)),
        Growth::AtMaximum(why) => Some(("StorageAtMaximum", why)),
        _ => None,
    };
    if let Some((reason, why)) = warning {
        let said = cluster
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION))
            .is_some_and(|c| &c.message == why);
        if !said {
            tracing::warn!(reason = %why, "storage growth held");
            crate::events::publish(
                ctx,
                cluster,
                cnmysql_k8s::events::Kind::Warning,
                "ExpandVolume",
                reason,
                why,
            )
            .await;
        }
    }
    Ok(growth)
}

/// The core's decision over both volume kinds: the data claims first, then
/// the binary logs' (the primary's last in both). A data volume at its
/// maximum does not hold the binary logs' growth back.
fn decide(cluster: &Cluster, views: &[ClaimView], expandable: &BTreeMap<String, bool>) -> Growth {
    use crate::objects::storage::{self, BINLOG_SUFFIX};
    let primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone());
    let (logs, data): (Vec<ClaimView>, Vec<ClaimView>) = views
        .iter()
        .cloned()
        .partition(|v| v.name.ends_with(BINLOG_SUFFIX));
    let data_size = requested(Some(storage::claim(cluster, "x"))).unwrap_or_default();
    let data_usage = usage(cluster, "data");
    let st = &cluster.spec.storage;
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let writes_refused = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.writes_refused.is_some());
    let data_growth = plan(
        &VolumeClaims {
            volume: "data",
            field: size_field(cluster),
            want: &data_size,
            claims: &data,
            auto_grow: st.auto_grow.as_ref().map(|g| ("spec.storage.autoGrow", g)),
            usage: &data_usage,
            last_step_ms: last_step_ms(cluster, false),
            now_ms,
            writes_refused,
        },
        expandable,
        primary.as_deref(),
    );
    if !matches!(data_growth, Growth::Nothing | Growth::AtMaximum(_)) {
        return data_growth;
    }
    let Some(want) = requested(storage::binlog_claim(cluster, "x")) else {
        return data_growth;
    };
    let log_usage = usage(cluster, "binlogs");
    let log_growth = plan(
        &VolumeClaims {
            volume: "binlogs",
            field: "spec.storage.binlogs.size",
            want: &want,
            claims: &logs,
            auto_grow: st
                .binlogs
                .as_ref()
                .and_then(|b| b.auto_grow.as_ref())
                .map(|g| ("spec.storage.binlogs.autoGrow", g)),
            usage: &log_usage,
            last_step_ms: last_step_ms(cluster, true),
            now_ms,
            writes_refused,
        },
        expandable,
        primary.as_deref(),
    );
    match log_growth {
        Growth::Nothing => data_growth,
        other => other,
    }
}

/// A claim made anew (an instance added or made again) asks for as much
/// as the largest claim of its kind already holds: a volume the policy
/// grew would otherwise come back at the Cluster's size, too small for
/// the copy of the data it is about to receive.
pub fn sized_like_the_rest(claim: &mut PersistentVolumeClaim, held: &[PersistentVolumeClaim]) {
    use crate::objects::storage::BINLOG_SUFFIX;
    let logs = claim.name_any().ends_with(BINLOG_SUFFIX);
    let largest = held
        .iter()
        .filter(|h| h.name_any().ends_with(BINLOG_SUFFIX) == logs)
        .filter_map(view)
        .max_by_key(|v| v.requested.1);
    let Some(largest) = largest else { return };
    let mine = view(claim).map_or(0, |v| v.requested.1);
    if largest.requested.1 <= mine {
        return;
    }
    if let Some(r) = claim
        .spec
        .as_mut()
        .and_then(|s| s.resources.as_mut())
        .and_then(|r| r.requests.as_mut())
    {
        r.insert(
            "storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(largest.requested.0),
        );
    }
}

/// The Cluster condition that reports it.
pub const CONDITION: &str = "StorageExpanding";

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, size: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"resources": {"requests": {"storage": size}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_new_claim_asks_for_as_much_as_the_largest_of_its_kind() {
        let held = [
            claim("db-1", "3Gi"),
            claim("db-2", "2Gi"),
            claim("db-1-binlog", "1Gi"),
        ];
        let mut data = claim("db-3", "1Gi");
        sized_like_the_rest(&mut data, &held);
        assert_eq!(requested(Some(data)).as_deref(), Some("3Gi"));
        let mut logs = claim("db-3-binlog", "512Mi");
        sized_like_the_rest(&mut logs, &held);
        assert_eq!(requested(Some(logs)).as_deref(), Some("1Gi"));
        // Never smaller than the Cluster asks.
        let mut big = claim("db-3", "5Gi");
        sized_like_the_rest(&mut big, &held);
        assert_eq!(requested(Some(big)).as_deref(), Some("5Gi"));
    }
}
