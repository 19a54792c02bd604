//! The Secrets of a Cluster: the cluster's certificate authority, a
//! certificate per instance (server and client: replication and the
//! control API use them), the operator's client certificate, and the
//! replication, `app` and administrative passwords. They are generated
//! once; only the certificates change afterwards (`crate::certificates`).
//! A user may bring the CA and the two passwords instead
//! (`spec.secrets`); the operator never changes a Secret it did not create.
//! Values never leave these objects: not in logs, events or status.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use cnmysql_api::Cluster;
use cnmysql_api::names::OPERATOR_IDENTITY;
use cnmysql_tls::{Ca, Identity};

use crate::labels::{self, cluster_labels, instance_labels};

/// One Secret the Cluster needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needed {
    /// The certificate authority (`ca.crt`, `ca.key`).
    Ca,
    /// A certificate issued by the CA to `who` (an instance or the operator).
    Certificate { who: String, names: Vec<String> },
    /// A random password (`password`, and `username` where one is fixed).
    Password { username: Option<String> },
}

/// The Secrets the operator generates for `cluster`, by name (the ones the
/// user brings are left out).
pub fn needed(cluster: &Cluster) -> Vec<(String, Needed)> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let s = &cluster.spec.secrets;
    let mut out = Vec::new();
    if s.ca_secret.is_none() {
        out.push((labels::ca_secret(&name), Needed::Ca));
    }
    for i in super::instances(cluster) {
        let mut names = vec![
            cnmysql_api::names::identity(&ns, &name, &i),
            i.clone(),
            format!("{i}.{ns}"),
            format!("{i}.{ns}.pod"),
            "localhost".into(),
            "127.0.0.1".into(),
        ];
        // Whichever instance a Service routes to, a client that checks
        // the name it connected by finds it: `<cluster>-rw`, `.ns`,
        // `.ns.svc` and `.ns.svc.cluster.local` (and `ro`, `r`).
        for svc in ["rw", "ro", "r"] {
            let s = format!("{name}-{svc}");
            names.extend([
                format!("{s}.{ns}"),
                format!("{s}.{ns}.svc"),
                format!("{s}.{ns}.svc.cluster.local"),
                s,
            ]);
        }
        out.push((
            labels::instance_tls_secret(&i),
            Needed::Certificate { who: i, names },
        ));
    }
    out.push((
        labels::operator_tls_secret(&name),
        Needed::Certificate {
            who: OPERATOR_IDENTITY.into(),
            names: vec![
                cnmysql_api::names::identity(&ns, &name, OPERATOR_IDENTITY),
                OPERATOR_IDENTITY.into(),
            ],
        },
    ));
    out.push((
        labels::replication_secret(&name),
        Needed::Password {
            username: Some(cnmysql_api::names::REPLICATION_USER.into()),
        },
    ));
    if s.app_secret.is_none() {
        out.push((
            labels::app_secret(&name),
            Needed::Password {
                username: Some(cnmysql_api::names::APP_USER.into()),
            },
        ));
    }
    if s.root_secret.is_none() {
        out.push((
            labels::root_secret(&name),
            Needed::Password {
                username: Some(cnmysql_api::names::ADMIN_USER.into()),
            },
        ));
    }
    out
}

/// A certificate of `cluster`'s CA for `who` with `names`: its subject
/// (`cnmysql_api::names::subject`) and the Cluster's lifetime.
pub fn issue(
    cluster: &Cluster,
    ca: &Ca,
    who: &str,
    names: &[String],
) -> Result<Identity, cnmysql_tls::TlsError> {
    let ns = cluster.namespace().unwrap_or_default();
    let (common_name, unit) = cnmysql_api::names::subject(&ns, &cluster.name_any(), who);
    let leaf = cnmysql_tls::Leaf {
        common_name: &common_name,
        unit: unit.as_deref(),
        names,
    };
    ca.issue_leaf(&leaf, cluster.spec.secrets.certificate_lifetime())
}

/// The identity (URI name) among a certificate's `names`.
pub fn identity_in(names: &[String]) -> Option<String> {
    names
        .iter()
        .find(|n| n.starts_with(cnmysql_tls::IDENTITY_SCHEME))
        .cloned()
}

/// The name of the Secret holding the cluster's CA.
pub fn ca_secret_name(cluster: &Cluster) -> String {
    cluster
        .spec
        .secrets
        .ca_secret
        .clone()
        .unwrap_or_else(|| labels::ca_secret(&cluster.name_any()))
}

/// 32 characters from a URL- and shell-safe alphabet.
pub use cnmysql_tls::random_password as password;

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect()
}

fn text(secret: &Secret, k: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(k))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// Read the CA out of its Secret: `ca.crt` and `ca.key`, or `tls.crt` and
/// `tls.key` (a cert-manager CA's Secret, whose `ca.crt` may be a root
/// above it).
pub fn ca_from(secret: &Secret) -> Result<Ca, String> {
    let pair = |c: &str, k: &str| Some((text(secret, c)?, text(secret, k)?));
    let (cert_pem, key_pem) = pair("ca.crt", "ca.key")
        .or_else(|| pair("tls.crt", "tls.key"))
        .ok_or_else(|| {
            format!(
                "Secret {} holds neither ca.crt and ca.key nor tls.crt and tls.key",
                secret.name_any()
            )
        })?;
    Ok(Ca {
        identity: Identity { cert_pem, key_pem },
    })
}

/// Why the user's `spec.secrets.serverTlsSecret` cannot serve: a key
/// missing, or no certificate its key belongs to. None when it can.
pub fn server_tls_problem(secret: &Secret) -> Option<String> {
    use cnmysql_api::replica::{CA_KEY, CERT_KEY, KEY_KEY};
    let name = secret.name_any();
    let mut texts = Vec::new();
    for key in [CERT_KEY, KEY_KEY, CA_KEY] {
        match text(secret, key) {
            Some(t) => texts.push(t),
            None => {
                return Some(format!(
                    "spec.secrets.serverTlsSecret: the Secret {name} has no key {key}: give it {CERT_KEY}, {KEY_KEY} and {CA_KEY}"
                ));
            }
        }
    }
    cnmysql_tls::unusable_pair(&texts[0], &texts[1], &texts[2]).map(|why| {
        format!(
            "spec.secrets.serverTlsSecret: the Secret {name} holds no usable certificate: {why}"
        )
    })
}

/// Generate the Secret `name`. `ca` is needed for certificates.
pub fn generate(
    cluster: &Cluster,
    name: &str,
    what: &Needed,
    ca: Option<&Ca>,
) -> Result<Secret, cnmysql_tls::TlsError> {
    let c = cluster.name_any();
    let (labels, data) = match what {
        Needed::Ca => {
            let ca = Ca::generate(&c)?;
            (
                cluster_labels(&c),
                data(&[
                    ("ca.crt", &ca.identity.cert_pem),
                    ("ca.key", &ca.identity.key_pem),
                ]),
            )
        }
        Needed::Certificate { who, names } => {
            let ca = ca.expect("certificates are issued after the CA is loaded");
            let id = issue(cluster, ca, who, names)?;
            let labels = if who == OPERATOR_IDENTITY {
                cluster_labels(&c)
            } else {
                instance_labels(&c, who)
            };
            (
                labels,
                data(&[
                    ("ca.crt", &ca.identity.cert_pem),
                    ("tls.crt", &id.cert_pem),
                    ("tls.key", &id.key_pem),
                ]),
            )
        }
        Needed::Password { username } => {
            let pw = password();
            let mut pairs = vec![("password", pw.as_str())];
            if let Some(u) = username {
                pairs.push(("username", u.as_str()));
            }
            (cluster_labels(&c), data(&pairs))
        }
    };
    Ok(Secret {
        metadata: super::meta(cluster, name.to_string(), labels),
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::testutil::cluster;

    #[test]
    fn user_secrets_are_not_generated() {
        let c = cluster("instances: 2\n");
        let names: Vec<String> = needed(&c).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "db-ca",
                "db-1-tls",
                "db-2-tls",
                "db-operator-tls",
                "db-replication",
                "db-app",
                "db-root"
            ]
        );
        let c = cluster("instances: 1\nsecrets:\n  appSecret: mine\n  caSecret: corp-ca\n");
        let names: Vec<String> = needed(&c).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["db-1-tls", "db-operator-tls", "db-replication", "db-root"]
        );
        assert_eq!(ca_secret_name(&c), "corp-ca");
    }

    #[test]
    fn a_cert_manager_ca_secret_is_read_as_the_ca() {
        let ca = Ca::generate("corp").unwrap();
        let mut s = Secret::default();
        s.metadata.name = Some("corp-ca".into());
        s.data = Some(data(&[
            ("tls.crt", &ca.identity.cert_pem),
            ("tls.key", &ca.identity.key_pem),
        ]));
        assert_eq!(ca_from(&s).unwrap().identity.cert_pem, ca.identity.cert_pem);
        s.data = Some(data(&[("tls.crt", &ca.identity.cert_pem)]));
        let e = ca_from(&s).unwrap_err();
        assert!(
            e.contains("corp-ca holds neither ca.crt and ca.key nor tls.crt and tls.key"),
            "{e}"
        );
    }

    #[test]
    fn a_users_server_certificate_is_checked_naming_the_field_and_the_key() {
        let ca = Ca::generate("corp").unwrap();
        let id = ca.issue("db-rw", &["db-rw".into()]).unwrap();
        let other = ca.issue("x", &["x".into()]).unwrap();
        let mut s = Secret::default();
        s.metadata.name = Some("db-server".into());
        s.data = Some(data(&[
            ("tls.crt", &id.cert_pem),
            ("tls.key", &id.key_pem),
            ("ca.crt", &ca.identity.cert_pem),
        ]));
        assert_eq!(server_tls_problem(&s), None);
        s.data = Some(data(&[("tls.crt", &id.cert_pem), ("tls.key", &id.key_pem)]));
        let e = server_tls_problem(&s).unwrap();
        assert!(
            e.contains("spec.secrets.serverTlsSecret") && e.contains("db-server has no key ca.crt"),
            "{e}"
        );
        s.data = Some(data(&[
            ("tls.crt", &id.cert_pem),
            ("tls.key", &other.key_pem),
            ("ca.crt", &ca.identity.cert_pem),
        ]));
        let e = server_tls_problem(&s).unwrap();
        assert!(e.contains("holds no usable certificate"), "{e}");
    }

    #[test]
    fn generated_secrets_are_usable_and_never_printed() {
        let c = cluster("instances: 1\n");
        let ca_secret = generate(&c, "db-ca", &Needed::Ca, None).unwrap();
        let ca = ca_from(&ca_secret).unwrap();
        let cert = generate(
            &c,
            "db-1-tls",
            &Needed::Certificate {
                who: "db-1".into(),
                names: vec!["db-1".into()],
            },
            Some(&ca),
        )
        .unwrap();
        let d = cert.data.as_ref().unwrap();
        assert!(String::from_utf8_lossy(&d["tls.crt"].0).starts_with("-----BEGIN CERTIFICATE"));
        let pw = generate(
            &c,
            "db-app",
            &Needed::Password {
                username: Some("app".into()),
            },
            None,
        )
        .unwrap();
        let secret = String::from_utf8(pw.data.as_ref().unwrap()["password"].0.clone()).unwrap();
        assert_eq!(secret.len(), 32);
        // k8s-openapi's Debug of a Secret does not show the bytes as text.
        assert!(!format!("{pw:?}").contains(&secret));
    }
}
