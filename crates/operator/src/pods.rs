//! The instances' Pods, written by the topology task alone, right after
//! each pass of the core's step: made when the step's answer lets the
//! instance run ([`Running`]) and the Cluster reconcile has laid their
//! groundwork ([`Ground`]: claims, Secrets, the service account), labelled
//! by role, all deleted while hibernated, and removed highest first on
//! scale-down (never the primary). Nothing is written while the Cluster is
//! paused.
//!
//! A primary handing over (a switchover under way) is made again at once:
//! it comes back read-only, handing over (`role::desired`), so the
//! switchover can finish instead of timing out into a failover. Holding
//! down lives in operator memory; a restarted operator derives it again
//! from the status in its first pass, before it makes any Pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use cnmysql_api::Cluster;
use cnmysql_core::running::Running;
use cnmysql_k8s::events::Kind;

use crate::apply::create_missing;
use crate::context::Context;
use crate::error::{At, Error};
use crate::events::publish;
use crate::labels::{CLUSTER, FIELD_MANAGER};
pub use crate::memory::Ground;
use crate::objects::{self, Environment, pod};

/// Why a Pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    Hibernating,
    ScaledDown,
}

/// The Pod writes that bring the live Pods to what the step said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Highest ordinal first.
    pub delete: Vec<(String, Removal)>,
    /// The one that becomes the primary first.
    pub create: Vec<Pod>,
    /// Role labels to apply, the one that becomes the primary first: rw
    /// gains its new endpoint in the first change kube-proxy programs,
    /// instead of waiting out kube-proxy's minimum interval between two
    /// syncs (1 s by default) after losing the old one.
    pub relabel: Vec<(String, BTreeMap<String, String>)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty() && self.create.is_empty() && self.relabel.is_empty()
    }
}

/// The plan for `cluster` (with its status as the pass left it), its live
/// Pods, and the step's answer.
pub fn plan(
    cluster: &Cluster,
    live: &BTreeMap<String, Pod>,
    keep: &Running,
    ground: Option<&Ground>,
    env: &Environment,
) -> Plan {
    let mut out = Plan::default();
    if keep.paused {
        return out;
    }
    let going = |p: &Pod| p.metadata.deletion_timestamp.is_some();
    if keep.hibernated {
        out.delete = live
            .iter()
            .filter(|(_, p)| !going(p))
            .map(|(n, _)| (n.clone(), Removal::Hibernating))
            .collect();
        return out;
    }
    let status = cluster.status.clone().unwrap_or_default();
    let mut names = objects::instances(cluster);
    names.sort_by_key(|n| {
        pod::role_labels(&status, n)[crate::labels::ROLE] != crate::labels::ROLE_PRIMARY
    });
    for instance in names {
        let roles = pod::role_labels(&status, &instance);
        match live.get(&instance) {
            Some(have) => {
                let labels = have.metadata.labels.clone().unwrap_or_default();
                if roles.iter().any(|(k, v)| labels.get(k) != Some(v)) {
                    out.relabel.push((instance, roles));
                }
            }
            None if keep.may_start(&instance)
                && ground.is_some_and(|g| g.laid_for(cluster, &instance)) =>
            {
                let mut p = pod::pod(cluster, &instance, env);
                p.metadata.labels.get_or_insert_default().extend(roles);
                out.create.push(p);
            }
            None => {}
        }
    }
    if scale_down_blocked(cluster).is_none() {
        let mut extra: Vec<&String> = live
            .iter()
            .filter(|(n, p)| extra(cluster, n) && !going(p))
            .map(|(n, _)| n)
            .collect();
        extra.sort_by_key(|n| std::cmp::Reverse(ordinal(cluster, n)));
        out.delete = extra
            .into_iter()
            .map(|n| (n.clone(), Removal::ScaledDown))
            .collect();
    }
    out
}

fn ordinal(cluster: &Cluster, name: &str) -> Option<u32> {
    cnmysql_api::names::ordinal_of(&cluster.name_any(), name)
}

/// Whether the Pod or claim `name` belongs to an instance above
/// `spec.instances`.
pub fn extra(cluster: &Cluster, name: &str) -> bool {
    let declared = cluster.spec.instances.max(0) as u32;
    ordinal(cluster, objects::storage::claim_instance(name)).is_some_and(|o| o > declared)
}

/// Why the instances above `spec.instances` cannot be removed now: the
/// primary (current or target) is one of them, and a switchover to a
/// lower ordinal must come first.
pub fn scale_down_blocked(cluster: &Cluster) -> Option<String> {
    let status = cluster.status.clone().unwrap_or_default();
    let name = cluster.name_any();
    let declared = cluster.spec.instances.max(0);
    [&status.current_primary, &status.target_primary]
        .into_iter()
        .flatten()
        .find(|p| extra(cluster, p))
        .map(|p| {
            format!(
                "spec.instances is {declared} but {p} is the primary: switch over to an instance up to {name}-{declared} first (kubectl cnmsql promote {name} {name}-1)"
            )
        })
}

/// The Pods of `cluster` in the operator's watch cache, by name.
pub fn cached(ctx: &Context, cluster: &Cluster) -> BTreeMap<String, Pod> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    ctx.pods
        .lock()
        .unwrap()
        .iter()
        .flat_map(|s| s.state())
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str()) && p.labels().get(CLUSTER) == Some(&name)
        })
        .map(|p| (p.name_any(), (*p).clone()))
        .collect()
}

/// Bring the Pods of `cluster` (its status as the pass left it) to the
/// step's answer. `cached`: its Pods in the watch cache; when they need no
/// write, nothing is asked of the API server. Otherwise the Pods are read
/// afresh and planned again from what the API server says.
pub async fn converge(
    ctx: &Context,
    cluster: &Cluster,
    cached: &BTreeMap<String, Pod>,
    keep: &Running,
) -> Result<(), Error> {
    if ctx.memory.routes_newer_than(cluster) {
        // The watch cache lags the task's own last status write: the Pods
        // were labelled from that newer status, and this copy would put
        // the former roles back (ro and r flapping) for a pass.
        tracing::debug!("the Cluster copy is older than the one the Pods follow; next pass");
        return Ok(());
    }
    let ground = ctx.memory.ground(cluster);
    if plan(cluster, cached, keep, ground.as_ref(), &ctx.env).is_empty() {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let live: BTreeMap<String, Pod> = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await
        .at(Error::Pods)?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    let plan = plan(cluster, &live, keep, ground.as_ref(), &ctx.env);
    for p in &plan.create {
        create_missing(ctx, &ns, p).await.at(Error::Pods)?;
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (instance, roles) in &plan.relabel {
        let patch = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": instance, "labels": roles },
        });
        pods.patch(instance, &pp, &Patch::Apply(&patch))
            .await
            .at(Error::Pods)?;
    }
    for (p, why) in &plan.delete {
        delete(ctx, cluster, &pods, p, *why).await?;
    }
    Ok(())
}

async fn delete(
    ctx: &Context,
    cluster: &Cluster,
    pods: &Api<Pod>,
    pod: &str,
    why: Removal,
) -> Result<(), Error> {
    match pods.delete(pod, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e).at(Error::Pods),
    }
    match why {
        Removal::Hibernating => tracing::info!(
            pod,
            "hibernating: deleted the instance Pod, keeping its claim"
        ),
        Removal::ScaledDown => {
            let note = format!(
                "{pod} removed: spec.instances is {}",
                cluster.spec.instances
            );
            publish(
                ctx,
                cluster,
                Kind::Normal,
                "ScaleDown",
                "InstanceRemoved",
                &note,
            )
            .await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(instances: i32, primary: &str) -> Cluster {
        let spec = serde_json::from_value(json!({ "instances": instances })).unwrap();
        let mut c = Cluster::new("db", spec);
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-1".into());
        c.status = Some(cnmysql_api::ClusterStatus {
            current_primary: Some(primary.into()),
            target_primary: Some(primary.into()),
            target_image: Some("mariadb:10.11".into()),
            ..Default::default()
        });
        c
    }

    fn env() -> Environment {
        Environment {
            operator_image: "cnmysql:test".into(),
        }
    }

    fn live(c: &Cluster, names: &[&str]) -> BTreeMap<String, Pod> {
        let status = c.status.clone().unwrap_or_default();
        names
            .iter()
            .map(|n| {
                let mut p = pod::pod(c, n, &env());
                p.metadata
                    .labels
                    .get_or_insert_default()
                    .extend(pod::role_labels(&status, n));
                (n.to_string(), p)
            })
            .collect()
    }

    fn ground(names: &[&str]) -> Ground {
        Ground {
            instances: names.iter().map(|n| n.to_string()).collect(),
            image: Some("mariadb:10.11".into()),
        }
    }

    fn created(p: &Plan) -> Vec<String> {
        p.create.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn only_what_the_step_lets_run_and_the_reconcile_laid_is_made() {
        let c = cluster(3, "db-1");
        let keep = Running {
            held: ["db-1".to_string()].into(),
            ..Default::default()
        };
        let g = ground(&["db-1", "db-2", "db-3"]);
        let p = plan(&c, &live(&c, &["db-2"]), &keep, Some(&g), &env());
        assert_eq!(created(&p), ["db-3"]);
        // No groundwork yet, or laid for another image: nothing is made.
        assert!(plan(&c, &BTreeMap::new(), &keep, None, &env()).is_empty());
        let other = Ground {
            image: Some("mariadb:11.8".into()),
            ..g.clone()
        };
        assert!(plan(&c, &BTreeMap::new(), &keep, Some(&other), &env()).is_empty());
    }

    #[test]
    fn paused_writes_nothing_and_hibernated_deletes_every_pod() {
        let c = cluster(3, "db-1");
        let g = ground(&["db-1", "db-2", "db-3"]);
        let paused = Running {
            paused: true,
            hibernated: true,
            ..Default::default()
        };
        assert!(plan(&c, &live(&c, &["db-1"]), &paused, Some(&g), &env()).is_empty());
        let asleep = Running {
            hibernated: true,
            ..Default::default()
        };
        let p = plan(&c, &live(&c, &["db-1", "db-3"]), &asleep, Some(&g), &env());
        assert_eq!(p.delete.len(), 2);
        assert!(p.create.is_empty() && p.relabel.is_empty());
    }

    #[test]
    fn the_new_primary_is_labelled_before_the_old_one_loses_it() {
        let before = cluster(3, "db-1");
        let pods = live(&before, &["db-1", "db-2", "db-3"]);
        let after = cluster(3, "db-2");
        let p = plan(&after, &pods, &Running::default(), None, &env());
        let order: Vec<&str> = p.relabel.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["db-2", "db-1"]);
    }

    #[test]
    fn scale_down_removes_the_highest_first_and_never_the_primary() {
        let c = cluster(2, "db-1");
        let pods = live(&cluster(4, "db-1"), &["db-1", "db-2", "db-3", "db-4"]);
        let p = plan(&c, &pods, &Running::default(), None, &env());
        let order: Vec<&str> = p.delete.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["db-4", "db-3"]);
        let primary_above = cluster(2, "db-3");
        assert!(scale_down_blocked(&primary_above).is_some());
        let p = plan(&primary_above, &pods, &Running::default(), None, &env());
        assert!(p.delete.is_empty(), "{p:?}");
    }
}
