//! The account this cluster uses on a server outside it (a replica
//! cluster's source, an import's source): a Secret (locally a folder under
//! the secrets directory) with `username`, `password`, `ca.crt`, and
//! `tls.crt`/`tls.key` for an account that requires a client certificate.
//! The certificate files are copied where mysqld can read them.

use std::path::PathBuf;
use std::time::Duration;

use cnmysql_api::replica::{
    CA_KEY, CERT_KEY, DONOR_TOKEN_KEY, KEY_KEY, PASSWORD_KEY, USERNAME_KEY,
};

use crate::bootstrap::read_secret;
use crate::config::InstanceConfig;

pub struct SourceAccount {
    pub user: String,
    pub password: String,
    pub ca: PathBuf,
    /// Client certificate and key, for an account that requires one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The token of the source's `cnmysql donor` (an import by backup).
    pub donor_token: Option<String>,
}

impl SourceAccount {
    /// The account of the Secret `secret`; `field` names the spec that
    /// needs it in errors.
    pub fn load(cfg: &InstanceConfig, secret: &str, field: &str) -> anyhow::Result<SourceAccount> {
        let dir = cfg.secrets.backup_dir.as_ref().ok_or_else(|| {
            anyhow::anyhow!("{field}: no secrets directory is known to this instance")
        })?;
        let from = dir.join(secret);
        let need = |key: &str| {
            let p = from.join(key);
            if p.is_file() {
                Ok(p)
            } else {
                Err(anyhow::anyhow!(
                    "{field}: the Secret {secret} has no key {key} ({} is missing): create it with {USERNAME_KEY}, {PASSWORD_KEY} and {CA_KEY}",
                    p.display()
                ))
            }
        };
        let user = read_secret(&need(USERNAME_KEY)?)?;
        let password = read_secret(&need(PASSWORD_KEY)?)?;
        // The server reads the files itself: copies in its run directory.
        let to = cfg.run_dir.join(secret);
        std::fs::create_dir_all(&to)?;
        // The client key readable by its owner only.
        let copy = |key: &str| -> anyhow::Result<PathBuf> {
            let dest = to.join(key);
            let text = std::fs::read_to_string(from.join(key))?;
            cnmysql_tls::write_private(&dest, &text, key == KEY_KEY)?;
            Ok(dest)
        };
        need(CA_KEY)?;
        let ca = copy(CA_KEY)?;
        let client = if from.join(CERT_KEY).is_file() && from.join(KEY_KEY).is_file() {
            Some((copy(CERT_KEY)?, copy(KEY_KEY)?))
        } else {
            None
        };
        let token = from.join(DONOR_TOKEN_KEY);
        let donor_token = token.is_file().then(|| read_secret(&token)).transpose()?;
        Ok(SourceAccount {
            user,
            password,
            ca,
            client,
            donor_token,
        })
    }

    /// A connection to `host:port` over TLS, the certificate checked
    /// against the CA and `name`.
    pub async fn connect(
        &self,
        host: &str,
        port: u16,
        name: &str,
    ) -> anyhow::Result<mysql_async::Conn> {
        let ssl = self.ssl_opts(host, name);
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(host)
            .tcp_port(port)
            .user(Some(self.user.clone()))
            .pass(Some(self.password.clone()))
            .prefer_socket(false)
            .ssl_opts(Some(ssl));
        Ok(
            tokio::time::timeout(Duration::from_secs(5), mysql_async::Conn::new(opts))
                .await
                .map_err(|_| anyhow::anyhow!("no answer within 5 s"))??,
        )
    }

    /// TLS to the source: its certificate must chain to the Secret's
    /// `ca.crt` and no other root (none built in), and carry `name`.
    pub fn ssl_opts(&self, host: &str, name: &str) -> mysql_async::SslOpts {
        let mut ssl = mysql_async::SslOpts::default()
            .with_root_certs(vec![self.ca.clone().into()])
            .with_disable_built_in_roots(true);
        if name != host {
            ssl = ssl.with_danger_tls_hostname_override(Some(name.to_string()));
        }
        if let Some((cert, key)) = &self.client {
            ssl = ssl.with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.clone().into(),
                key.clone().into(),
            )));
        }
        ssl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_trusted_through_its_ca_alone_and_by_the_name_asked_for() {
        let a = SourceAccount {
            user: "importer".into(),
            password: "x".into(),
            ca: "/s/ca.crt".into(),
            client: None,
            donor_token: None,
        };
        let ssl = a.ssl_opts("10.0.0.7", "db.example");
        assert!(ssl.disable_built_in_roots(), "no public roots");
        assert_eq!(ssl.root_certs().len(), 1);
        assert_eq!(ssl.tls_hostname_override(), Some("db.example"));
        assert!(!ssl.skip_domain_validation() && !ssl.accept_invalid_certs());
        assert_eq!(
            a.ssl_opts("db.example", "db.example")
                .tls_hostname_override(),
            None
        );
    }
}
