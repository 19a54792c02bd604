//! What each holder of a certificate gets next: the plan that renews
//! certificates before they expire and moves a cluster to a new CA
//! without a moment in which two parties distrust each other.
//!
//! Every party (an instance, the operator) holds a certificate and a trust
//! bundle (the CAs it accepts). When the CA changes, in three steps, each
//! waiting for every instance to report that it loaded the previous one:
//!
//! 1. **trust**: each bundle gets the new CA beside the old; certificates
//!    stay as they are;
//! 2. **switch**: once every party trusts the new CA, each certificate is
//!    issued again from it;
//! 3. **narrow**: once every party presents a certificate of the new CA,
//!    the bundles drop the old one.
//!
//! Between steps both old and new certificates are accepted everywhere, so
//! no connection between the parts of a cluster is refused. A certificate
//! due by its lifetime ([`crate::renewal_due`]) is issued again at any
//! step, from the current CA.

use std::collections::BTreeMap;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use sha2::Digest;

/// A short fingerprint of a certificate: the first 16 hex digits of the
/// SHA-256 of its DER.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(der))[..16].to_string()
}

fn ders(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect()
}

fn pem_of(der: &CertificateDer<'_>) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new("CERTIFICATE", der.as_ref().to_vec()), config)
}

/// The fingerprints of the CAs in a bundle, in order.
pub fn bundle_fingerprints(pem: &str) -> Vec<String> {
    ders(pem).iter().map(|d| fingerprint(d)).collect()
}

/// The fingerprint of the CA in `bundle` that signed `leaf`.
pub fn issuer_in(leaf: &str, bundle: &str) -> Option<String> {
    ders(bundle)
        .iter()
        .find(|ca| crate::signed_by(leaf, &pem_of(ca)))
        .map(|ca| fingerprint(ca))
}

/// A party's files as held now.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub leaf: String,
    pub trust: String,
    /// An instance (its manager reports what it loaded), not the operator.
    pub instance: bool,
    /// The identity (URI name) its certificate must carry: one without it
    /// is issued again.
    pub identity: Option<String>,
}

/// What an instance's manager reports it loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The CAs it trusts (fingerprints).
    pub trust: Vec<String>,
    /// The CA that signed the certificate it presents.
    pub issuer: Option<String>,
}

/// What a party gets now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing until `renew_at` (Unix seconds).
    Keep { renew_at: i64 },
    /// A new trust bundle; the same certificate.
    Trust { bundle: String, why: &'static str },
    /// A new certificate from the current CA, with this trust bundle.
    Issue { bundle: String, why: &'static str },
    /// Due, but another party must catch up first.
    Wait(String),
}

/// The plan for every party. `loaded` has an entry for each instance that
/// answered; one missing holds the steps that need everyone.
pub fn plan(
    ca_pem: &str,
    lifetime_secs: i64,
    now: i64,
    held: &BTreeMap<String, Held>,
    loaded: &BTreeMap<String, Loaded>,
) -> BTreeMap<String, Step> {
    let Some(ca) = ders(ca_pem).into_iter().next() else {
        return BTreeMap::new();
    };
    let current = fingerprint(&ca);
    let ca_only = pem_of(&ca);
    let lagging = |ok: &dyn Fn(&Held, Option<&Loaded>) -> bool| -> Vec<String> {
        held.iter()
            .filter(|(name, h)| !ok(h, loaded.get(*name).filter(|_| h.instance)))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let trusts = |h: &Held, l: Option<&Loaded>| {
        bundle_fingerprints(&h.trust).contains(&current)
            && (!h.instance || l.is_some_and(|l| l.trust.contains(&current)))
    };
    let presents = |h: &Held, l: Option<&Loaded>| {
        crate::signed_by(&h.leaf, &ca_only)
            && (!h.instance || l.is_some_and(|l| l.issuer.as_deref() == Some(current.as_str())))
    };
    let not_trusting = lagging(&trusts);
    let not_presenting = lagging(&presents);
    held.iter()
        .map(|(name, h)| {
            let step = step_for(
                h,
                &ca_only,
                &current,
                lifetime_secs,
                now,
                &not_trusting,
                &not_presenting,
            );
            (name.clone(), step)
        })
        .collect()
}

fn step_for(
    h: &Held,
    ca_only: &str,
    current: &str,
    lifetime_secs: i64,
    now: i64,
    not_trusting: &[String],
    not_presenting: &[String],
) -> Step {
    let trust = bundle_fingerprints(&h.trust);
    if crate::validity_of(&h.leaf).is_none() {
        return Step::Issue {
            bundle: ca_only.to_string(),
            why: "it has no readable certificate",
        };
    }
    if !trust.iter().any(|t| t == current) {
        // 1. Trust the new CA beside the old one.
        let old = ders(&h.trust).into_iter().next();
        let bundle = format!("{ca_only}{}", old.map(|d| pem_of(&d)).unwrap_or_default());
        return Step::Trust {
            bundle,
            why: "a new certificate authority: trusted beside the old one first",
        };
    }
    if !crate::signed_by(&h.leaf, ca_only) {
        // 2. Switch once everyone trusts it.
        if !not_trusting.is_empty() {
            return Step::Wait(format!(
                "the new certificate authority is not yet trusted by {}",
                not_trusting.join(", ")
            ));
        }
        return Step::Issue {
            bundle: h.trust.clone(),
            why: "another certificate authority signed it",
        };
    }
    if trust.len() > 1 && not_presenting.is_empty() {
        // 3. Everyone presents the new CA's certificates: drop the old.
        return Step::Trust {
            bundle: ca_only.to_string(),
            why: "the old certificate authority is no longer presented by anyone",
        };
    }
    let renewal = crate::renewal_due(&h.leaf, ca_only, lifetime_secs, now).or_else(|| {
        h.identity
            .as_deref()
            .filter(|id| !crate::carries_identity(&h.leaf, id))
            .map(|_| "it does not carry the identity asked for")
    });
    match renewal {
        Some(why) => Step::Issue {
            bundle: h.trust.clone(),
            why,
        },
        None => Step::Keep {
            renew_at: crate::renew_at(&h.leaf).unwrap_or(now),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ca;

    fn party(ca: &Ca, name: &str, trust: &str) -> Held {
        Held {
            leaf: ca.issue(name, &[name.into()]).unwrap().cert_pem,
            trust: trust.to_string(),
            instance: name != "op",
            identity: None,
        }
    }

    #[test]
    fn a_certificate_without_its_identity_is_issued_again() {
        let ca = Ca::generate("db").unwrap();
        let trust = ca.identity.cert_pem.clone();
        let id = "spiffe://cnmysql.io/ns/prod/cluster/db/instance/db-1".to_string();
        let mut h = party(&ca, "db-1", &trust);
        h.identity = Some(id.clone());
        let held = BTreeMap::from([("db-1".to_string(), h.clone())]);
        let steps = plan(
            &trust,
            crate::LEAF_LIFETIME_SECONDS,
            jiff_now(),
            &held,
            &loaded_from(&held),
        );
        assert!(matches!(&steps["db-1"], Step::Issue { why, .. } if why.contains("identity")));
        h.leaf = ca
            .issue("db-1", &["db-1".into(), id.clone()])
            .unwrap()
            .cert_pem;
        assert!(crate::carries_identity(&h.leaf, &id));
        let held = BTreeMap::from([("db-1".to_string(), h)]);
        let now = jiff_now();
        let steps = plan(
            &trust,
            crate::LEAF_LIFETIME_SECONDS,
            now,
            &held,
            &loaded_from(&held),
        );
        assert!(
            matches!(&steps["db-1"], Step::Keep { .. }),
            "{:?}",
            steps["db-1"]
        );
    }

    fn jiff_now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    fn loaded_from(held: &BTreeMap<String, Held>) -> BTreeMap<String, Loaded> {
        held.iter()
            .filter(|(_, h)| h.instance)
            .map(|(n, h)| {
                let l = Loaded {
                    trust: bundle_fingerprints(&h.trust),
                    issuer: issuer_in(&h.leaf, &h.trust),
                };
                (n.clone(), l)
            })
            .collect()
    }

    /// Apply each step's files, as a platform would.
    fn apply(ca: &Ca, held: &mut BTreeMap<String, Held>, steps: &BTreeMap<String, Step>) {
        for (n, s) in steps {
            let h = held.get_mut(n).unwrap();
            match s {
                Step::Trust { bundle, .. } => h.trust = bundle.clone(),
                Step::Issue { bundle, .. } => {
                    h.leaf = ca.issue(n, std::slice::from_ref(n)).unwrap().cert_pem;
                    h.trust = bundle.clone();
                }
                _ => {}
            }
        }
    }

    fn kinds(steps: &BTreeMap<String, Step>) -> Vec<&'static str> {
        steps
            .values()
            .map(|s| match s {
                Step::Keep { .. } => "keep",
                Step::Trust { .. } => "trust",
                Step::Issue { .. } => "issue",
                Step::Wait(_) => "wait",
            })
            .collect()
    }

    #[test]
    fn a_new_ca_is_trusted_everywhere_then_used_then_the_old_one_dropped() {
        let old = Ca::generate("db").unwrap();
        let new = Ca::generate("db").unwrap();
        let old_pem = &old.identity.cert_pem;
        let mut held: BTreeMap<String, Held> = ["db-1", "db-2", "op"]
            .iter()
            .map(|n| (n.to_string(), party(&old, n, old_pem)))
            .collect();
        let life = 90 * 86_400;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let ca = &new.identity.cert_pem;
        // Nothing to do under the old CA.
        let steady = plan(old_pem, life, now, &held, &loaded_from(&held));
        assert!(kinds(&steady).iter().all(|k| *k == "keep"), "{steady:?}");
        // 1. Trust first, everywhere, certificates unchanged.
        let steps = plan(ca, life, now, &held, &loaded_from(&held));
        assert_eq!(kinds(&steps), ["trust", "trust", "trust"]);
        apply(&new, &mut held, &steps);
        assert_eq!(bundle_fingerprints(&held["db-1"].trust).len(), 2);
        // An instance that has not loaded its new bundle holds the switch.
        let mut stale = loaded_from(&held);
        stale.get_mut("db-2").unwrap().trust.truncate(0);
        let steps = plan(ca, life, now, &held, &stale);
        assert_eq!(kinds(&steps), ["wait", "wait", "wait"]);
        let Step::Wait(why) = &steps["db-1"] else {
            panic!()
        };
        assert!(why.contains("not yet trusted by db-2"), "{why}");
        // 2. Everyone trusts it: certificates from the new CA.
        let steps = plan(ca, life, now, &held, &loaded_from(&held));
        assert_eq!(kinds(&steps), ["issue", "issue", "issue"]);
        apply(&new, &mut held, &steps);
        // Old and new both still trusted while instances load theirs.
        let mut behind = loaded_from(&held);
        behind.get_mut("db-1").unwrap().issuer = Some(fingerprint(&ders(old_pem)[0]));
        assert_eq!(
            kinds(&plan(ca, life, now, &held, &behind)),
            ["keep", "keep", "keep"]
        );
        // 3. Everyone presents the new CA's: the old one goes.
        let steps = plan(ca, life, now, &held, &loaded_from(&held));
        assert_eq!(kinds(&steps), ["trust", "trust", "trust"]);
        apply(&new, &mut held, &steps);
        let steps = plan(ca, life, now, &held, &loaded_from(&held));
        assert_eq!(kinds(&steps), ["keep", "keep", "keep"]);
        assert_eq!(
            bundle_fingerprints(&held["op"].trust),
            [fingerprint(&ders(ca)[0])]
        );
    }

    #[test]
    fn pem_written_here_reads_back() {
        let ca = Ca::generate("db").unwrap();
        let d = ders(&ca.identity.cert_pem);
        assert_eq!(ders(&pem_of(&d[0])), d);
    }
}
