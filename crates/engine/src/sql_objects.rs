//! Declared databases, users and grants, the same on every platform: each
//! pass sends what every present object declares (a User with its
//! Secret's password, set again when the Secret's value changed) and what
//! every deleted one with `deletionPolicy: Delete` takes away to the
//! primary's manager (`POST /instance/sql-objects`), which makes the
//! server hold it; each object's outcome is recorded (its Ready
//! condition), a change made is told in an Event, and a deleted object is
//! forgotten once done. A platform ([`SqlObjectsPlatform`]) only finds the
//! objects, reads Secrets, says where the primary answers and records.

use std::collections::BTreeMap;
use std::future::Future;

use cnmysql_api::backup::SecretKeyRef;
use cnmysql_api::sql_objects::SqlObjectDoc;
use cnmysql_api::{ClusterSpec, ClusterStatus};
use cnmysql_control::client::ControlClient;
use cnmysql_control::contract::{SqlObject, SqlObjectResult};
use cnmysql_core::event::Event;
use cnmysql_core::sql_objects::{Declared, password_digest};

/// What a platform provides to the workflow.
pub trait SqlObjectsPlatform {
    /// A client of the instances' control APIs (the cluster's mTLS).
    fn client(&mut self) -> impl Future<Output = Result<ControlClient, String>> + Send;

    /// Where `instance`'s control API answers now.
    fn address(
        &mut self,
        instance: &str,
    ) -> impl Future<Output = Result<Option<(String, u16)>, String>> + Send;

    /// The value of a Secret's key; an error names the Secret and the key.
    fn secret(&mut self, key: &SecretKeyRef)
    -> impl Future<Output = Result<String, String>> + Send;

    /// How `doc` stands now.
    fn record(&mut self, doc: &SqlObjectDoc, outcome: &Outcome) -> impl Future<Output = ()> + Send;

    /// A deleted object is done with (taken away, or kept by its policy).
    fn forget(&mut self, doc: &SqlObjectDoc) -> impl Future<Output = ()> + Send;

    /// Record an event.
    fn event(&mut self, event: &Event) -> impl Future<Output = ()> + Send;
}

/// How an object stands after a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The primary holds what it declares.
    pub ready: bool,
    /// Why not, or what was done.
    pub message: String,
    /// A User's password as now set (see `password_digest`).
    pub password_digest: Option<String>,
}

/// An object present, with what the platform recorded of it last.
pub struct Present {
    pub doc: SqlObjectDoc,
    pub last: Outcome,
}

/// One pass over a Cluster's objects.
pub struct Pass<'a> {
    /// The Cluster's name and spec (its own Secrets, what it lets
    /// declarations adopt).
    pub cluster: &'a str,
    pub spec: &'a ClusterSpec,
    /// The other Clusters beside it (on Kubernetes, of its namespace):
    /// their Secrets are no User's password either.
    pub neighbours: Vec<(String, ClusterSpec)>,
    pub status: &'a ClusterStatus,
    pub present: Vec<Present>,
    /// Deleted, still to be taken away (or let go).
    pub deleted: Vec<SqlObjectDoc>,
    /// A secret of the cluster's that keys the password digests.
    pub digest_key: String,
}

/// Carry one pass out.
pub async fn reconcile<P: SqlObjectsPlatform>(p: &mut P, pass: Pass<'_>) {
    let mut sent: Vec<(SqlObjectDoc, Outcome, SqlObject, Option<String>)> = Vec::new();
    let who = Who {
        cluster: pass.cluster,
        spec: pass.spec,
        neighbours: &pass.neighbours,
        digest_key: &pass.digest_key,
    };
    for Present { doc, last } in pass.present {
        match declared(p, &who, &doc, &last).await {
            Ok((declared, digest)) => {
                let object = SqlObject {
                    key: doc.key(),
                    declared,
                };
                sent.push((doc, last, object, digest));
            }
            Err(why) => settle(p, &doc, &last, not_ready(why)).await,
        }
    }
    let mut removals = Vec::new();
    for doc in pass.deleted {
        match Declared::removal_of(&doc) {
            Some(declared) => {
                let object = SqlObject {
                    key: doc.key(),
                    declared,
                };
                removals.push((doc, object));
            }
            None => p.forget(&doc).await,
        }
    }
    if sent.is_empty() && removals.is_empty() {
        return;
    }
    let objects: Vec<SqlObject> = sent
        .iter()
        .map(|s| s.2.clone())
        .chain(removals.iter().map(|r| r.1.clone()))
        .collect();
    let results = match send(p, pass.status, &objects).await {
        Ok(r) => r,
        Err(why) => {
            for (doc, last, _, _) in &sent {
                settle(p, doc, last, not_ready(why.clone())).await;
            }
            return;
        }
    };
    for (doc, last, _, digest) in sent {
        let r = results.get(&doc.key()).cloned().unwrap_or_default();
        let outcome = match r.error {
            Some(e) => Outcome {
                password_digest: last.password_digest.clone(),
                ..not_ready(e)
            },
            None => Outcome {
                ready: true,
                message: done_message(&r),
                password_digest: digest,
            },
        };
        settle(p, &doc, &last, outcome).await;
        if !r.applied.is_empty() {
            let message = format!("{}: {}", doc.key(), r.applied.join("; "));
            p.event(&Event::new(false, "SqlObjectApplied", None, message))
                .await;
        }
    }
    for (doc, _) in removals {
        let r = results.get(&doc.key()).cloned().unwrap_or_default();
        match r.error {
            None => {
                let message = format!("{} deleted: {}", doc.key(), done_message(&r));
                p.event(&Event::new(false, "SqlObjectDeleted", None, message))
                    .await;
                p.forget(&doc).await;
            }
            Some(e) => {
                let message = format!("{} could not be taken away: {e}", doc.key());
                p.event(&Event::new(true, "SqlObjectFailed", None, message))
                    .await;
            }
        }
    }
}

fn not_ready(message: String) -> Outcome {
    Outcome {
        ready: false,
        message,
        password_digest: None,
    }
}

fn done_message(r: &SqlObjectResult) -> String {
    if let Some(note) = r.note.as_ref().filter(|_| r.applied.is_empty()) {
        note.clone()
    } else if r.applied.is_empty() {
        "held as declared".into()
    } else {
        r.applied.join("; ")
    }
}

/// Record `now`; a failure that is new is also an Event.
async fn settle<P: SqlObjectsPlatform>(
    p: &mut P,
    doc: &SqlObjectDoc,
    last: &Outcome,
    now: Outcome,
) {
    if !now.ready && now.message != last.message {
        let message = format!("{}: {}", doc.key(), now.message);
        p.event(&Event::new(true, "SqlObjectFailed", None, message))
            .await;
    }
    p.record(doc, &now).await;
}

/// The Cluster a pass is for.
struct Who<'a> {
    cluster: &'a str,
    spec: &'a ClusterSpec,
    neighbours: &'a [(String, ClusterSpec)],
    digest_key: &'a str,
}

/// What `doc` declares, with the digest of a User's password. A password
/// is never taken from one of the Cluster's own Secrets, whether or not
/// it exists (the refusal tells nothing of which do).
async fn declared<P: SqlObjectsPlatform>(
    p: &mut P,
    pass: &Who<'_>,
    doc: &SqlObjectDoc,
    last: &Outcome,
) -> Result<(Declared, Option<String>), String> {
    let adopt = pass.spec.managed.adopt.covers(doc);
    let SqlObjectDoc::User(u) = doc else {
        return Ok((Declared::of(doc, "", false, adopt), None));
    };
    let secret = &u.spec.password_secret_key_ref;
    let clusters = std::iter::once((pass.cluster, pass.spec))
        .chain(pass.neighbours.iter().map(|(n, s)| (n.as_str(), s)));
    if clusters
        .into_iter()
        .any(|(n, s)| cnmysql_api::own_secrets::is_own_secret(n, s, &secret.name))
    {
        return Err(format!(
            "spec.passwordSecretKeyRef.name: {} is a Secret a Cluster uses itself (its passwords, certificates, stores or sources): give the User a Secret of its own",
            secret.name
        ));
    }
    let password = p.secret(secret).await?;
    if password.is_empty() {
        return Err(format!(
            "the Secret {} holds an empty {}: a User needs a password",
            secret.name, secret.key
        ));
    }
    let name = u.spec.name_in_server(&doc.name()).to_string();
    let digest = password_digest(pass.digest_key, &name, &u.spec.host, &password);
    let set = last.password_digest.as_deref() != Some(digest.as_str());
    Ok((Declared::of(doc, &password, set, adopt), Some(digest)))
}

/// Send `objects` to the primary; the results by key.
async fn send<P: SqlObjectsPlatform>(
    p: &mut P,
    status: &ClusterStatus,
    objects: &[SqlObject],
) -> Result<BTreeMap<String, SqlObjectResult>, String> {
    let Some(primary) = status.current_primary.clone() else {
        return Err("waiting for a primary".into());
    };
    let (host, port) = p
        .address(&primary)
        .await?
        .ok_or_else(|| format!("waiting for the primary {primary} to have an address"))?;
    // Its certificate names the instance, whatever address it is reached at.
    let client = p.client().await?.expecting(&primary);
    let results = cnmysql_control::requests::reconcile_sql_objects(&client, &host, port, objects)
        .await
        .map_err(|e| format!("the primary {primary}: {e:#}"))?;
    Ok(results.into_iter().map(|r| (r.key.clone(), r)).collect())
}
