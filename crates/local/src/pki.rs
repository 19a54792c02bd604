//! The local cluster's certificates, in `<state>/pki`: its CA (`ca.crt`,
//! `ca.key`, ten years) and a certificate per instance and for the
//! operator's part (`<name>.crt`, `<name>.key`). A certificate is issued
//! again when it is due ([`cnmysql_tls::renewal_due`]): the instance
//! managers see the new files and load them without a restart.

use std::path::Path;

use std::collections::BTreeMap;

use cnmysql_api::names::{LOCAL_NAMESPACE, OPERATOR_IDENTITY};
use cnmysql_tls::rotation::{Held, Loaded, Step, plan};
use cnmysql_tls::{Ca, Identity, TlsPaths};

/// Who holds a certificate, and the names it is valid for.
fn parties(cluster: &str, instances: &[String]) -> Vec<(String, Vec<String>)> {
    let id = |who: &str| cnmysql_api::names::identity(LOCAL_NAMESPACE, cluster, who);
    let mut parties: Vec<(String, Vec<String>)> = instances
        .iter()
        .map(|n| {
            let names = [id(n).as_str(), n.as_str(), "localhost", "127.0.0.1", "::1"]
                .map(str::to_string)
                .to_vec();
            (n.clone(), names)
        })
        .collect();
    parties.push((
        OPERATOR_IDENTITY.into(),
        vec![id(OPERATOR_IDENTITY), OPERATOR_IDENTITY.into()],
    ));
    parties
}

/// The CA in `pki`, generated when there is none yet.
fn ca(pki: &Path, cluster: &str) -> anyhow::Result<Ca> {
    let cert = pki.join("ca.crt");
    let key = pki.join("ca.key");
    if cert.exists() && key.exists() {
        return Ok(Ca {
            identity: Identity {
                cert_pem: std::fs::read_to_string(&cert)?,
                key_pem: std::fs::read_to_string(&key)?,
            },
        });
    }
    let ca = Ca::generate(cluster)?;
    cnmysql_tls::write_private(&key, &ca.identity.key_pem, true)?;
    cnmysql_tls::write_private(&cert, &ca.identity.cert_pem, false)?;
    Ok(ca)
}

/// What each instance's manager reported it loaded, from the status.
pub fn loaded(status: &cnmysql_api::ClusterStatus) -> BTreeMap<String, Loaded> {
    status
        .instance_states
        .iter()
        .filter(|(_, st)| !st.tls_trust.is_empty())
        .map(|(n, st)| {
            let l = Loaded {
                trust: st.tls_trust.clone(),
                issuer: st.tls_issuer.clone(),
            };
            (n.clone(), l)
        })
        .collect()
}

/// Who got new files and why (a first issue is not listed), and who
/// waits for what.
pub type Outcome = (Vec<(String, &'static str)>, Vec<String>);

/// Carry out the plan ([`cnmysql_tls::rotation::plan`]) for every party:
/// certificates missing or due are issued, valid for `lifetime_secs`; a new
/// CA is trusted, then used, then the old one dropped. Returns who got new
/// files and why (a first issue is not listed), and who waits for what.
pub fn ensure(
    pki: &Path,
    cluster: &str,
    instances: &[String],
    lifetime_secs: i64,
    loaded: &BTreeMap<String, Loaded>,
) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(pki)?;
    let ca = ca(pki, cluster)?;
    let now = jiff::Timestamp::now().as_second();
    let parties = parties(cluster, instances);
    let held: BTreeMap<String, Held> = parties
        .iter()
        .map(|(who, _)| {
            let paths = TlsPaths::in_dir(pki, who);
            let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
            let leaf = if paths.key.exists() {
                read(&paths.cert)
            } else {
                String::new()
            };
            let h = Held {
                leaf,
                trust: read(&paths.ca),
                instance: who != OPERATOR_IDENTITY,
                identity: Some(cnmysql_api::names::identity(LOCAL_NAMESPACE, cluster, who)),
            };
            (who.clone(), h)
        })
        .collect();
    let steps = plan(&ca.identity.cert_pem, lifetime_secs, now, &held, loaded);
    let mut changed = Vec::new();
    let mut waits = Vec::new();
    for (who, names) in &parties {
        let paths = TlsPaths::in_dir(pki, who);
        let first = held[who].leaf.is_empty();
        match &steps[who] {
            Step::Keep { .. } => continue,
            Step::Wait(why) => {
                waits.push(format!("{who}: {why}"));
                continue;
            }
            Step::Trust { bundle, why } => {
                cnmysql_tls::write_private(&paths.ca, bundle, false)?;
                changed.push((who.clone(), *why));
            }
            Step::Issue { bundle, why } => {
                let (common_name, unit) =
                    cnmysql_api::names::subject(LOCAL_NAMESPACE, cluster, who);
                let leaf = cnmysql_tls::Leaf {
                    common_name: &common_name,
                    unit: unit.as_deref(),
                    names,
                };
                let id = ca.issue_leaf(&leaf, lifetime_secs)?;
                // The key first: a reader that sees the new certificate
                // before its key refuses the pair and tries again.
                cnmysql_tls::write_private(&paths.ca, bundle, false)?;
                cnmysql_tls::write_private(&paths.key, &id.key_pem, true)?;
                cnmysql_tls::write_private(&paths.cert, &id.cert_pem, false)?;
                if !first {
                    changed.push((who.clone(), *why));
                }
            }
        }
    }
    Ok((changed, waits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_issued_once_then_again_when_due() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let names = vec!["db-1".to_string(), "db-2".to_string()];
        let none = BTreeMap::new();
        assert!(
            ensure(&pki, "db", &names, 90 * 86_400, &none)
                .unwrap()
                .0
                .is_empty()
        );
        let first = std::fs::read_to_string(pki.join("db-1.crt")).unwrap();
        assert!(
            ensure(&pki, "db", &names, 90 * 86_400, &none)
                .unwrap()
                .0
                .is_empty()
        );
        assert_eq!(
            std::fs::read_to_string(pki.join("db-1.crt")).unwrap(),
            first
        );
        // A shorter lifetime asked for: everyone is issued again.
        let renewed = ensure(&pki, "db", &names, 600, &none).unwrap().0;
        let who: Vec<&str> = renewed.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(who, ["db-1", "db-2", OPERATOR_IDENTITY]);
        let second = std::fs::read_to_string(pki.join("db-1.crt")).unwrap();
        assert_ne!(second, first);
        let m = TlsPaths::in_dir(&pki, "db-1").load().unwrap();
        m.server_config().unwrap();
    }
}
