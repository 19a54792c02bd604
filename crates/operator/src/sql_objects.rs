//! The `Database`, `User` and `Grant` controllers: the Kubernetes platform
//! of the engine's workflow (`cnmysql_engine::sql_objects`, the same as
//! locally). Each object is carried out on its Cluster's primary when it
//! changes and every 30 seconds after (drift is put back, a changed
//! password Secret is set), its status holds a `Ready` condition, and one
//! with `deletionPolicy: Delete` carries a finalizer until what it
//! declared is taken away.

use std::sync::Arc;
use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_api::backup::SecretKeyRef;
use cnmysql_api::sql_objects::{
    Database, DeletionPolicy, Grant, SqlObjectDoc, SqlObjectStatus, User,
};
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_engine::sql_objects::{Outcome, Pass, Present, SqlObjectsPlatform, reconcile};
use cnmysql_k8s::events::Kind;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;

/// Held by an object whose deletion takes something away.
pub const FINALIZER: &str = "mysql.cnmysql.io/sql-object";
/// How often a held object is looked at again (drift, a rotated Secret).
const EVERY: Duration = Duration::from_secs(30);

/// A resource kind of this controller.
pub trait Declares:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn doc(&self) -> SqlObjectDoc;
    fn object_status(&self) -> Option<&SqlObjectStatus>;
}

macro_rules! declares {
    ($kind:ident) => {
        impl Declares for $kind {
            fn doc(&self) -> SqlObjectDoc {
                SqlObjectDoc::$kind(self.clone())
            }
            fn object_status(&self) -> Option<&SqlObjectStatus> {
                self.status.as_ref()
            }
        }
    };
}
declares!(Database);
declares!(User);
declares!(Grant);

/// What the object's status says of the last pass.
fn last_outcome(s: Option<&SqlObjectStatus>) -> Outcome {
    let ready = s.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    Outcome {
        ready: ready.is_some_and(|c| c.status == "True"),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        password_digest: s.and_then(|s| s.password_digest.clone()),
    }
}

async fn reconcile_object<K: Declares>(obj: Arc<K>, ctx: Arc<Context>) -> kube::Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let doc = obj.doc();
    let deleting = obj.meta().deletion_timestamp.is_some();
    let held = obj.finalizers().iter().any(|f| f == FINALIZER);
    let mut platform = KubeSqlObjects {
        ctx: &ctx,
        api: &api,
        obj: obj.as_ref(),
        cluster: None,
    };
    let problems = doc.check();
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
        platform.record(&doc, &not_ready(text.join("; "))).await;
        return Ok(Action::await_change());
    }
    if deleting && !held {
        return Ok(Action::await_change());
    }
    if !deleting && doc.deletion_policy() == DeletionPolicy::Delete && !held {
        let mut f = obj.finalizers().to_vec();
        f.push(FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": f}});
        api.patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cluster) = clusters.get_opt(doc.cluster()).await? else {
        if deleting {
            // Nothing left to take anything away from.
            platform.forget(&doc).await;
        } else {
            let why = format!(
                "spec.cluster.name: Cluster {} does not exist in {ns}",
                doc.cluster()
            );
            platform.record(&doc, &not_ready(why)).await;
        }
        return Ok(Action::requeue(EVERY));
    };
    let status = cluster.status.clone().unwrap_or_default();
    if cnmysql_core::sql_objects::on_hold(&status, cluster.annotations()) {
        return Ok(Action::requeue(EVERY));
    }
    let digest_key = match root_password(&ctx, &cluster).await {
        Ok(k) => k,
        Err(why) => {
            platform.record(&doc, &not_ready(why)).await;
            return Ok(Action::requeue(EVERY));
        }
    };
    platform.cluster = Some(&cluster);
    let last = last_outcome(obj.object_status());
    let name = cluster.name_any();
    let neighbours: Vec<_> = clusters
        .list(&Default::default())
        .await?
        .into_iter()
        .filter(|c| c.name_any() != name)
        .map(|c| (c.name_any(), c.spec))
        .collect();
    let pass = if deleting {
        Pass {
            cluster: &name,
            spec: &cluster.spec,
            neighbours,
            status: &status,
            present: vec![],
            deleted: vec![doc],
            digest_key,
        }
    } else {
        Pass {
            cluster: &name,
            spec: &cluster.spec,
            neighbours,
            status: &status,
            present: vec![Present { doc, last }],
            deleted: vec![],
            digest_key,
        }
    };
    reconcile(&mut platform, pass).await;
    Ok(Action::requeue(EVERY))
}

fn not_ready(message: String) -> Outcome {
    Outcome {
        ready: false,
        message,
        password_digest: None,
    }
}

/// The cluster's administrator password: the key of the password digests.
async fn root_password(ctx: &Context, cluster: &Cluster) -> Result<String, String> {
    let name = cluster
        .spec
        .secrets
        .root_secret
        .clone()
        .unwrap_or_else(|| crate::labels::root_secret(&cluster.name_any()));
    let r = SecretKeyRef {
        name,
        key: "password".into(),
    };
    secret_value(ctx, &cluster.namespace().unwrap_or_default(), &r).await
}

async fn secret_value(ctx: &Context, ns: &str, r: &SecretKeyRef) -> Result<String, String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let s = secrets
        .get_opt(&r.name)
        .await
        .map_err(|e| format!("the Secret {}: {e}", r.name))?
        .ok_or_else(|| format!("the Secret {} does not exist", r.name))?;
    let v = s
        .data
        .and_then(|d| d.get(&r.key).cloned())
        .ok_or_else(|| format!("the Secret {} has no key {}", r.name, r.key))?;
    String::from_utf8(v.0).map_err(|_| format!("the Secret {} key {} is not text", r.name, r.key))
}

/// Kubernetes as the platform of one object's pass.
struct KubeSqlObjects<'a, K: Declares> {
    ctx: &'a Context,
    api: &'a Api<K>,
    obj: &'a K,
    cluster: Option<&'a Cluster>,
}

impl<K: Declares> SqlObjectsPlatform for KubeSqlObjects<'_, K> {
    async fn client(&mut self) -> Result<ControlClient, String> {
        let cluster = self.cluster.ok_or("no Cluster")?;
        crate::topology::control_client(self.ctx, cluster)
            .await
            .map_err(|e| e.to_string())
    }

    async fn address(&mut self, instance: &str) -> Result<Option<(String, u16)>, String> {
        let cluster = self.cluster.ok_or("no Cluster")?;
        crate::backups::instance_address(self.ctx, cluster, instance).await
    }

    async fn secret(&mut self, key: &SecretKeyRef) -> Result<String, String> {
        secret_value(self.ctx, &self.obj.namespace().unwrap_or_default(), key).await
    }

    async fn record(&mut self, _doc: &SqlObjectDoc, o: &Outcome) {
        let now = jiff::Timestamp::now();
        let last = last_outcome(self.obj.object_status());
        let since = self
            .obj
            .object_status()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .filter(|_| last.ready == o.ready)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        let condition = Condition {
            type_: "Ready".into(),
            status: if o.ready { "True" } else { "False" }.into(),
            reason: if o.ready {
                "Reconciled"
            } else {
                "NotReconciled"
            }
            .into(),
            message: o.message.chars().take(1000).collect(),
            last_transition_time: since,
            observed_generation: self.obj.meta().generation,
        };
        let st = SqlObjectStatus {
            conditions: vec![condition],
            observed_generation: self.obj.meta().generation,
            password_digest: o.password_digest.clone().or(last.password_digest),
        };
        if self.obj.object_status() == Some(&st) {
            // Unchanged: no write every pass.
            return;
        }
        let patch = json!({ "status": st });
        let r = self
            .api
            .patch_status(
                &self.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(object = %self.obj.name_any(), error = %e, "status not written");
        }
    }

    async fn forget(&mut self, _doc: &SqlObjectDoc) {
        let f: Vec<String> = self
            .obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": f}});
        let r = self
            .api
            .patch(
                &self.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(object = %self.obj.name_any(), error = %e, "finalizer not removed");
        }
    }

    async fn event(&mut self, e: &Event) {
        let Some(cluster) = self.cluster else { return };
        let kind = if e.warning {
            Kind::Warning
        } else {
            Kind::Normal
        };
        crate::events::publish(self.ctx, cluster, kind, "Reconcile", e.reason, &e.message).await;
    }
}

fn error_policy<K>(_: Arc<K>, e: &kube::Error, _: Arc<Context>) -> Action {
    tracing::warn!(error = %e, "database, user or grant reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn run<K: Declares>(
    client: &kube::Client,
    ns: &Option<String>,
    ctx: Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) -> impl std::future::Future<Output = ()> {
    let api: Api<K> = match ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(stop)
        .run(reconcile_object::<K>, error_policy, ctx)
        .for_each(|_| async {})
}

/// Run the Database, User and Grant controllers until `stop`.
pub async fn control(
    client: kube::Client,
    ns: Option<String>,
    ctx: Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    futures::join!(
        run::<Database>(&client, &ns, ctx.clone(), stop.clone()),
        run::<User>(&client, &ns, ctx.clone(), stop.clone()),
        run::<Grant>(&client, &ns, ctx, stop),
    );
}
