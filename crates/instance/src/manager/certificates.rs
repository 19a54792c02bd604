//! The instance's certificates as its manager holds them. Loaded at start,
//! and again whenever the files change (the operator or the local control
//! plane issued new ones before the old expire), without a restart: the
//! control API takes new connections with the new certificate, the client
//! to the peers presents it, and mysqld is told to load its files again
//! (`FLUSH SSL` on MariaDB, `ALTER INSTANCE RELOAD TLS` on MySQL). Open
//! connections keep the certificate they started with.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::*;

use cnmysql_tls::{Material, TlsPaths};
use rustls::ServerConfig;
use tokio::sync::watch;

use crate::client::ControlClient;

/// What was loaded from the files, and the configurations built from it.
struct Loaded {
    /// The files' text, to tell a change.
    text: String,
    peers: ControlClient,
    expires_at: Option<String>,
    trust: Vec<String>,
    issuer: Option<String>,
}

pub struct Certificates {
    paths: TlsPaths,
    loaded: Mutex<Loaded>,
    server: watch::Sender<Arc<ServerConfig>>,
    /// When the user's certificate mysqld presents expires
    /// (`spec.secrets.serverTlsSecret`), Unix seconds.
    server_expiry: Mutex<Option<i64>>,
}

fn text_of(m: &Material) -> String {
    format!("{}{}{}", m.ca_pem, m.identity.cert_pem, m.identity.key_pem)
}

fn expiry(m: &Material) -> Option<String> {
    m.expires_at()
        .map(|t| cnmysql_core::time::timestamp(t.saturating_mul(1000)))
}

impl Certificates {
    /// Load the files; an error names what cannot be read or used.
    pub fn load(paths: TlsPaths) -> anyhow::Result<Certificates> {
        let m = paths.load()?;
        let server = m.server_config()?;
        let loaded = Loaded {
            text: text_of(&m),
            peers: ControlClient::new(m.client_config()?),
            expires_at: expiry(&m),
            trust: cnmysql_tls::rotation::bundle_fingerprints(&m.ca_pem),
            issuer: cnmysql_tls::rotation::issuer_in(&m.identity.cert_pem, &m.ca_pem),
        };
        Ok(Certificates {
            paths,
            loaded: Mutex::new(loaded),
            server: watch::channel(server).0,
            server_expiry: Mutex::new(None),
        })
    }

    /// The control API's configuration, newest first.
    pub fn server(&self) -> watch::Receiver<Arc<ServerConfig>> {
        self.server.subscribe()
    }

    /// The client to the peers' control APIs, with the current certificate.
    pub fn peers(&self) -> ControlClient {
        self.loaded.lock().unwrap().peers.clone()
    }

    /// The CAs trusted and the one that signed the certificate presented.
    pub fn trust(&self) -> (Vec<String>, Option<String>) {
        let l = self.loaded.lock().unwrap();
        (l.trust.clone(), l.issuer.clone())
    }

    /// When the loaded certificate or CA, or the user's certificate mysqld
    /// presents, expires first (RFC 3339).
    pub fn expires_at(&self) -> Option<String> {
        let own = self.loaded.lock().unwrap().expires_at.clone();
        let user = (*self.server_expiry.lock().unwrap())
            .map(|t| cnmysql_core::time::timestamp(t.saturating_mul(1000)));
        match (own, user) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Record when the user's server certificate expires.
    pub fn set_server_expiry(&self, at: Option<i64>) {
        *self.server_expiry.lock().unwrap() = at;
    }

    /// Read the files again; when they changed and hold a usable set (a
    /// certificate matching its key, signed for the CA's configurations),
    /// take it into use. `Ok(true)` when new ones were taken; an error
    /// leaves the old ones in use (a writer may be half-way: the next call
    /// sees the whole).
    pub fn refresh(&self) -> anyhow::Result<bool> {
        let m = self.paths.load()?;
        let text = text_of(&m);
        if self.loaded.lock().unwrap().text == text {
            return Ok(false);
        }
        let server = m.server_config()?;
        let peers = ControlClient::new(m.client_config()?);
        *self.loaded.lock().unwrap() = Loaded {
            text,
            peers,
            expires_at: expiry(&m),
            trust: cnmysql_tls::rotation::bundle_fingerprints(&m.ca_pem),
            issuer: cnmysql_tls::rotation::issuer_in(&m.identity.cert_pem, &m.ca_pem),
        };
        self.server.send_replace(server);
        Ok(true)
    }
}

/// The renewal concern: it takes renewed certificates into use and has
/// mysqld load them.
pub(super) struct Renewal {
    pub link: super::link::Link,
    pub certs: Arc<Certificates>,
}

impl Renewal {
    /// Every two seconds: take renewed certificates into use, and have
    /// mysqld load them (again on the next round if it could not).
    pub async fn run(self) {
        let mut server_behind = false;
        loop {
            if self.link.sleep_or_stop(Duration::from_secs(2)).await {
                return;
            }
            match self.certs.refresh() {
                Ok(true) => {
                    tracing::info!(
                        expires = self.certs.expires_at().unwrap_or_default(),
                        "renewed certificates taken into use"
                    );
                    server_behind = true;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "certificate files not usable yet");
                }
            }
            server_behind |= self.refresh_users_certificate();
            if server_behind {
                server_behind = !self.reload_server_tls().await;
            }
        }
    }

    /// Take a renewed `spec.secrets.serverTlsSecret` (or a new cluster CA
    /// for the peers' bundle) into the files mysqld reads: true when they
    /// changed. An unusable Secret keeps the installed files and says why.
    fn refresh_users_certificate(&self) -> bool {
        match crate::server_tls::install(&self.link.cfg) {
            Ok(done) => {
                self.certs.set_server_expiry(done.expires_at);
                if done.changed {
                    tracing::info!(
                        "the server certificate of spec.secrets.serverTlsSecret taken into use"
                    );
                }
                done.changed
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the server certificate is not renewed");
                false
            }
        }
    }

    /// Have mysqld load its certificate files again; true once done (or
    /// when it is not running: it reads them when it starts).
    async fn reload_server_tls(&self) -> bool {
        let Some(pool) = self.link.pool() else {
            return true;
        };
        let sql = cnmysql_core::flavor::reload_tls(self.link.cfg.flavor());
        let r = async {
            let mut c = pool.get_conn().await?;
            c.query_drop(&sql.text).await
        };
        match tokio::time::timeout(Duration::from_secs(5), r).await {
            Ok(Ok(())) => {
                tracing::info!("mysqld loaded the renewed certificates");
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "mysqld could not load the renewed certificates; trying again");
                false
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_files_are_taken_once_whole_and_a_half_written_set_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let ca = cnmysql_tls::Ca::generate("db").unwrap();
        let paths = TlsPaths::in_dir(dir.path(), "db-1");
        let first = ca.issue("db-1", &["db-1".into()]).unwrap();
        paths.write(&ca, &first).unwrap();
        let certs = Certificates::load(paths.clone()).unwrap();
        let server = certs.server();
        assert!(!certs.refresh().unwrap(), "nothing changed");
        let second = ca.issue_for("db-1", &["db-1".into()], 600).unwrap();
        // The certificate written, its key not yet: refused, old kept.
        cnmysql_tls::write_private(&paths.cert, &second.cert_pem, false).unwrap();
        assert!(certs.refresh().is_err());
        let before = certs.expires_at();
        cnmysql_tls::write_private(&paths.key, &second.key_pem, true).unwrap();
        assert!(certs.refresh().unwrap());
        assert_ne!(certs.expires_at(), before);
        assert!(server.has_changed().unwrap(), "the control API sees it");
        // The user's server certificate counts when it expires first.
        let own = certs.expires_at().unwrap();
        certs.set_server_expiry(Some(1_000_000_000));
        assert_eq!(certs.expires_at().unwrap(), "2001-09-09T01:46:40Z");
        certs.set_server_expiry(Some(4_000_000_000));
        assert_eq!(certs.expires_at().unwrap(), own);
    }
}
