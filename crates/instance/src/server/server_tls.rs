//! The certificate mysqld presents when it is the user's
//! (`spec.secrets.serverTlsSecret`): the Secret's `tls.crt`, `tls.key` and
//! `ca.crt`, found as `<secrets dir>/<Secret>/<key>`, are checked (the key
//! belongs to the certificate) and copied into the run directory, beside a
//! bundle of the cluster CA and the user's CA that peers (replicas, clone
//! recipients) trust. Copies, so that a Secret half-updated by the kubelet
//! is never what mysqld loads, and so that a renewed Secret is told apart.

use std::path::{Path, PathBuf};

use cnmysql_api::replica::{CA_KEY, CERT_KEY, KEY_KEY};

use crate::config::InstanceConfig;

/// What [`install`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// The files mysqld reads changed: it must load them again.
    pub changed: bool,
    /// When the user's certificate expires (Unix seconds).
    pub expires_at: Option<i64>,
}

/// Where the user's Secret is, or None when mysqld presents the
/// instance's own certificate.
fn source_dir(cfg: &InstanceConfig) -> anyhow::Result<Option<(String, PathBuf)>> {
    let Some(name) = cfg.spec.secrets.server_tls_secret.clone() else {
        return Ok(None);
    };
    let dir = cfg.secrets.backup_dir.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "spec.secrets.serverTlsSecret: no secrets directory is known to this instance"
        )
    })?;
    let at = dir.join(&name);
    Ok(Some((name, at)))
}

fn read_key(secret: &str, dir: &Path, key: &str) -> anyhow::Result<String> {
    let p = dir.join(key);
    std::fs::read_to_string(&p).map_err(|e| {
        anyhow::anyhow!(
            "spec.secrets.serverTlsSecret: cannot read {} ({e}): the Secret {secret} needs the keys {CERT_KEY}, {KEY_KEY} and {CA_KEY}",
            p.display()
        )
    })
}

/// Copy the user's certificate, key and the peers' bundle where mysqld
/// reads them, when they differ from what is there. Nothing to do without
/// `spec.secrets.serverTlsSecret`. An error names the file or the problem
/// and leaves what is installed as it was.
pub fn install(cfg: &InstanceConfig) -> anyhow::Result<Installed> {
    let Some((secret, from)) = source_dir(cfg)? else {
        return Ok(Installed::default());
    };
    let cert = read_key(&secret, &from, CERT_KEY)?;
    let key = read_key(&secret, &from, KEY_KEY)?;
    let user_ca = read_key(&secret, &from, CA_KEY)?;
    check_pair(&secret, &cert, &key, &user_ca)?;
    let cluster_ca = std::fs::read_to_string(&cfg.tls.ca)
        .map_err(|e| anyhow::anyhow!("the cluster CA {}: {e}", cfg.tls.ca.display()))?;
    let bundle = format!("{}\n{}\n", cluster_ca.trim_end(), user_ca.trim_end());
    let to = cfg.server_tls_paths();
    crate::run_dir::make_private_dir(to.cert.parent().unwrap_or(&cfg.run_dir))?;
    let mut changed = false;
    for (path, text, private) in [
        (&to.peers_ca, &bundle, false),
        (&to.cert, &cert, false),
        (&to.key, &key, true),
    ] {
        if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            cnmysql_tls::write_private(path, text, private)?;
            changed = true;
        }
    }
    Ok(Installed {
        changed,
        expires_at: cnmysql_tls::validity_of(&cert).map(|(_, until)| until),
    })
}

/// The key must be the certificate's, and both readable as PEM.
fn check_pair(secret: &str, cert: &str, key: &str, ca: &str) -> anyhow::Result<()> {
    match cnmysql_tls::unusable_pair(cert, key, ca) {
        None => Ok(()),
        Some(why) => Err(anyhow::anyhow!(
            "spec.secrets.serverTlsSecret: the Secret {secret} holds no usable certificate: {why} ({CERT_KEY} with its key {KEY_KEY}, {CA_KEY} the CA that issued it)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> InstanceConfig {
        let mut cfg = crate::config::tests::sample(dir);
        cfg.spec.secrets.server_tls_secret = Some("db-server-tls".into());
        cfg.secrets.backup_dir = Some(dir.join("secrets"));
        let ours = cnmysql_tls::Ca::generate("db").unwrap();
        let id = ours.issue("db-2", &["db-2".into()]).unwrap();
        std::fs::create_dir_all(cfg.tls.ca.parent().unwrap()).unwrap();
        cfg.tls.write(&ours, &id).unwrap();
        cfg
    }

    fn write_secret(cfg: &InstanceConfig, ca: &cnmysql_tls::Ca, key_of: Option<&str>) {
        let dir = cfg
            .secrets
            .backup_dir
            .as_ref()
            .unwrap()
            .join("db-server-tls");
        std::fs::create_dir_all(&dir).unwrap();
        let id = ca.issue("db-rw", &["db-rw".into()]).unwrap();
        std::fs::write(dir.join(CERT_KEY), &id.cert_pem).unwrap();
        std::fs::write(dir.join(KEY_KEY), key_of.unwrap_or(&id.key_pem)).unwrap();
        std::fs::write(dir.join(CA_KEY), &ca.identity.cert_pem).unwrap();
    }

    #[test]
    fn the_users_certificate_is_installed_once_and_its_ca_joins_the_peers_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let err = install(&cfg).unwrap_err().to_string();
        assert!(
            err.contains("spec.secrets.serverTlsSecret") && err.contains("tls.crt"),
            "{err}"
        );
        let corp = cnmysql_tls::Ca::generate("corp").unwrap();
        write_secret(&cfg, &corp, None);
        let first = install(&cfg).unwrap();
        assert!(first.changed && first.expires_at.is_some());
        let to = cfg.server_tls_paths();
        let bundle = std::fs::read_to_string(&to.peers_ca).unwrap();
        let fp = cnmysql_tls::rotation::bundle_fingerprints;
        assert_eq!(fp(&bundle).len(), 2, "the cluster CA and the user's");
        assert!(!install(&cfg).unwrap().changed, "nothing new");
        // Renewed: a new certificate is taken.
        write_secret(&cfg, &corp, None);
        assert!(install(&cfg).unwrap().changed);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_and_the_installed_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let corp = cnmysql_tls::Ca::generate("corp").unwrap();
        write_secret(&cfg, &corp, None);
        install(&cfg).unwrap();
        let before = std::fs::read_to_string(cfg.server_tls_paths().cert).unwrap();
        let other = corp.issue("x", &["x".into()]).unwrap();
        write_secret(&cfg, &corp, Some(&other.key_pem));
        let err = install(&cfg).unwrap_err().to_string();
        assert!(err.contains("no usable certificate"), "{err}");
        assert_eq!(
            std::fs::read_to_string(cfg.server_tls_paths().cert).unwrap(),
            before
        );
    }
}
