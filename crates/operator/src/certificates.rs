//! The certificates in a Cluster's Secrets, kept by the rotation plan
//! (`cnmysql_tls::rotation`): issued when missing, issued again before
//! they expire, and moved to a new CA (a new `spec.secrets.caSecret`, or
//! the generated `<cluster>-ca` deleted) in steps that never leave two
//! parts of the cluster distrusting each other. Each instance's manager
//! reports what it loaded in the Cluster status (`instanceStates`); steps
//! that need every instance wait for those reports.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use cnmysql_api::Cluster;
use cnmysql_tls::Ca;
use cnmysql_tls::rotation::{Held, Loaded, Step, plan};

use crate::context::Context;
use crate::labels;
use crate::objects::secrets::{self, Needed};

fn text(secret: &Secret, k: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(k))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .unwrap_or_default()
}

/// What each instance's manager loaded, by the name of its Secret.
fn loaded(cluster: &Cluster) -> BTreeMap<String, Loaded> {
    let Some(st) = cluster.status.as_ref() else {
        return BTreeMap::new();
    };
    st.instance_states
        .iter()
        .filter(|(_, s)| !s.tls_trust.is_empty())
        .map(|(n, s)| {
            let l = Loaded {
                trust: s.tls_trust.clone(),
                issuer: s.tls_issuer.clone(),
            };
            (labels::instance_tls_secret(n), l)
        })
        .collect()
}

/// Carry out the plan for the certificate Secrets in `have` (missing ones
/// are made by the caller). Returns in how many seconds to look again.
pub async fn ensure(
    cluster: &Cluster,
    ctx: &Context,
    api: &Api<Secret>,
    have: &[Secret],
    ca: &Ca,
) -> anyhow::Result<i64> {
    let lifetime = cluster.spec.secrets.certificate_lifetime();
    let now = jiff::Timestamp::now().as_second();
    let mut held = BTreeMap::new();
    let mut wanted = BTreeMap::new();
    for (name, what) in secrets::needed(cluster) {
        let Needed::Certificate { who, names } = &what else {
            continue;
        };
        // A missing one was just made from the current CA.
        match have.iter().find(|s| s.name_any() == name) {
            None => {}
            Some(s) => {
                let h = Held {
                    leaf: text(s, "tls.crt"),
                    trust: text(s, "ca.crt"),
                    instance: who != cnmysql_api::names::OPERATOR_IDENTITY,
                    identity: secrets::identity_in(names),
                };
                held.insert(name.clone(), h);
                wanted.insert(name.clone(), (who.clone(), names.clone(), s.clone()));
            }
        }
    }
    let steps = plan(
        &ca.identity.cert_pem,
        lifetime,
        now,
        &held,
        &loaded(cluster),
    );
    let mut again = i64::MAX;
    for (name, step) in &steps {
        let (who, names, secret) = &wanted[name];
        let (data, why) = match step {
            Step::Keep { renew_at } => {
                again = again.min(renew_at - now);
                continue;
            }
            Step::Wait(why) => {
                tracing::info!(secret = %name, why, "a certificate step waits");
                again = again.min(5);
                continue;
            }
            Step::Trust { bundle, why } => (BTreeMap::from([("ca.crt", bundle.clone())]), *why),
            Step::Issue { bundle, why } => {
                let id = secrets::issue(cluster, ca, who, names)?;
                let data = BTreeMap::from([
                    ("ca.crt", bundle.clone()),
                    ("tls.crt", id.cert_pem),
                    ("tls.key", id.key_pem),
                ]);
                (data, *why)
            }
        };
        write(api, secret, data).await?;
        tracing::info!(secret = %name, reason = why, "new certificate files");
        crate::events::publish(
            ctx,
            cluster,
            cnmysql_k8s::events::Kind::Normal,
            "RenewCertificate",
            "CertificateRenewed",
            &format!("new certificate files in Secret {name}: {why}"),
        )
        .await;
        again = again.min(5);
    }
    Ok(again.max(0))
}

/// Patch keys of a Secret of ours, on the condition that it is still the
/// version read (a merge patch naming a resourceVersion fails with a
/// conflict otherwise; the operator may patch Secrets, not update them).
async fn write(
    api: &Api<Secret>,
    secret: &Secret,
    data: BTreeMap<&str, String>,
) -> anyhow::Result<()> {
    let data: BTreeMap<&str, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": secret.metadata.resource_version},
        "data": data,
    });
    api.patch(
        &secret.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(())
}
