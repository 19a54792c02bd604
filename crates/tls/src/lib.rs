//! The cluster's own PKI and the mutual-TLS configurations built on it.
//!
//! One CA per cluster signs:
//! * a certificate per instance (CN = instance name), used by its mysqld as
//!   server certificate, by its manager's control API, and as the client
//!   certificate of its replication connection (the replication account
//!   `REQUIRE X509`);
//! * the operator's client certificate (CN = `cnmysql-operator`), which the
//!   control API demands for operator-only endpoints.
//!
//! Keys are ECDSA P-256; everything uses rustls with the ring provider.

pub mod rotation;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("invalid PEM in {what}: {detail}")]
    Pem { what: String, detail: String },
    #[error("cannot verify client certificates: {0}")]
    Verifier(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The crypto provider used everywhere: rustls with ring, TLS 1.3 suites
/// only, AES-128-GCM first (the cheapest per byte on bulk transfers such as
/// clone streams, and as strong as needed for a cluster-private CA).
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite;
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites = vec![
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(p)
}

/// A certificate and its private key, PEM encoded.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a private key.
        f.debug_struct("Identity")
            .field("cert_pem", &"…")
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A new random password: 32 characters from a URL- and shell-safe
/// alphabet (about 186 bits), for every account and token made here.
pub fn random_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..32)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The cluster CA: its certificate and signing key.
#[derive(Clone, Debug)]
pub struct Ca {
    pub identity: Identity,
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

impl Ca {
    /// A new CA for `cluster`, valid for ten years.
    pub fn generate(cluster: &str) -> Result<Ca, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("cnmysql {cluster} CA"));
        dn.push(DnType::OrganizationName, "cloudnative-mysql");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, 3650);
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            identity: Identity {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            },
        })
    }

    /// Issue a certificate usable for both server and client authentication,
    /// valid for [`LEAF_LIFETIME_SECONDS`]. `names` become DNS or IP subject
    /// alternative names.
    pub fn issue(&self, common_name: &str, names: &[String]) -> Result<Identity, TlsError> {
        self.issue_for(common_name, names, LEAF_LIFETIME_SECONDS)
    }

    /// As [`Ca::issue`], valid for `lifetime_secs` from now.
    pub fn issue_for(
        &self,
        common_name: &str,
        names: &[String],
        lifetime_secs: i64,
    ) -> Result<Identity, TlsError> {
        self.issue_leaf(
            &Leaf {
                common_name,
                unit: None,
                names,
            },
            lifetime_secs,
        )
    }

    /// A certificate for `leaf`, valid for `lifetime_secs` from now.
    /// Names of the form `spiffe://…` become URI subject alternative names
    /// (the identity a party is known by), addresses IP ones, the rest DNS.
    pub fn issue_leaf(&self, leaf: &Leaf<'_>, lifetime_secs: i64) -> Result<Identity, TlsError> {
        let ca_key = KeyPair::from_pem(&self.identity.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.identity.cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, leaf.common_name);
        dn.push(DnType::OrganizationName, "cloudnative-mysql");
        if let Some(unit) = leaf.unit {
            dn.push(DnType::OrganizationalUnitName, unit);
        }
        params.distinguished_name = dn;
        params.subject_alt_names = leaf
            .names
            .iter()
            .map(|n| {
                if n.starts_with(IDENTITY_SCHEME) {
                    return Ok(SanType::URI(n.clone().try_into()?));
                }
                match n.parse::<std::net::IpAddr>() {
                    Ok(ip) => Ok(SanType::IpAddress(ip)),
                    Err(_) => Ok(SanType::DnsName(n.clone().try_into()?)),
                }
            })
            .collect::<Result<_, rcgen::Error>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::seconds(BACKDATE_SECONDS);
        params.not_after = now + time::Duration::seconds(lifetime_secs);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// What a leaf certificate is issued for: its subject (common name and
/// organizational unit beside the organization `cloudnative-mysql`) and
/// its subject alternative names.
pub struct Leaf<'a> {
    pub common_name: &'a str,
    pub unit: Option<&'a str>,
    pub names: &'a [String],
}

/// The scheme of the URI names that say whom a certificate identifies.
pub const IDENTITY_SCHEME: &str = "spiffe://";

/// The URI subject alternative names of a certificate (DER).
pub fn uris_of(cert: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some(u.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether the first certificate of `cert_pem` carries the URI `identity`.
pub fn carries_identity(cert_pem: &str, identity: &str) -> bool {
    certs(cert_pem, "certificate")
        .ok()
        .and_then(|c| c.into_iter().next())
        .is_some_and(|c| uris_of(&c).iter().any(|u| u == identity))
}

/// Which name of a certificate [`oneline`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Subject,
    Issuer,
}

/// A name of the first certificate of `cert_pem` as the servers' `REQUIRE
/// SUBJECT` and `REQUIRE ISSUER` compare it (`/CN=…/O=…`, in the
/// certificate's order). None when it holds anything that form may write
/// otherwise (a multi-valued part, an attribute without a short name, a
/// character outside letters, digits, space and `.-_@:`): the caller then
/// leaves that requirement out rather than lock everyone out.
pub fn oneline(cert_pem: &str, which: Name) -> Option<String> {
    let der = certs(cert_pem, "certificate").ok()?.into_iter().next()?;
    let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let name = match which {
        Name::Subject => c.subject(),
        Name::Issuer => c.issuer(),
    };
    let mut out = String::new();
    for rdn in name.iter() {
        let mut parts = rdn.iter();
        let (attr, None) = (parts.next()?, parts.next()) else {
            return None;
        };
        let short = match attr.attr_type().to_id_string().as_str() {
            "2.5.4.3" => "CN",
            "2.5.4.10" => "O",
            "2.5.4.11" => "OU",
            "2.5.4.6" => "C",
            "2.5.4.7" => "L",
            "2.5.4.8" => "ST",
            _ => return None,
        };
        let value = attr.as_str().ok()?;
        let plain = value
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || " .-_@:".contains(ch));
        if !plain || value.is_empty() {
            return None;
        }
        out.push_str(&format!("/{short}={value}"));
    }
    (!out.is_empty()).then_some(out)
}

/// How long a certificate from [`Ca::issue`] is valid: 90 days, as the
/// Cluster's default (`spec.secrets.certificateLifetimeSeconds`).
pub const LEAF_LIFETIME_SECONDS: i64 = 90 * 86_400;

/// When a certificate is valid from and until (Unix seconds).
pub fn validity_of(cert_pem: &str) -> Option<(i64, i64)> {
    let der = certs(cert_pem, "certificate").ok()?.into_iter().next()?;
    let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let v = c.validity();
    Some((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// Why a leaf certificate must be issued again at `now` (Unix seconds):
/// it cannot be read, another CA signed it (the CA was replaced), a
/// third of its life or less is left, or its lifetime is not the one
/// asked for (`lifetime_secs`, so a changed setting takes effect). None
/// while it is good.
pub fn renewal_due(
    cert_pem: &str,
    ca_pem: &str,
    lifetime_secs: i64,
    now: i64,
) -> Option<&'static str> {
    let Some((from, until)) = validity_of(cert_pem) else {
        return Some("the certificate cannot be read");
    };
    if !signed_by(cert_pem, ca_pem) {
        return Some("another certificate authority signed it");
    }
    if (until - from - BACKDATE_SECONDS - lifetime_secs).abs() > 60 {
        return Some("its lifetime differs from the one asked for");
    }
    if now >= renew_at(cert_pem)? {
        return Some("a third of its lifetime or less is left");
    }
    None
}

/// When a certificate is due to be issued again: a third of its lifetime
/// (not counting the minute it is back-dated) before it expires.
pub fn renew_at(cert_pem: &str) -> Option<i64> {
    let (from, until) = validity_of(cert_pem)?;
    Some(until - (until - from - BACKDATE_SECONDS).max(3) / 3)
}

/// How far back a certificate's validity starts, for clocks a little behind.
const BACKDATE_SECONDS: i64 = 60;

/// Why a certificate brought by the user cannot be presented: it, its key
/// or the CA does not read as PEM, or the key is another certificate's.
/// None when it can.
pub fn unusable_pair(cert_pem: &str, key_pem: &str, ca_pem: &str) -> Option<String> {
    let m = Material {
        ca_pem: ca_pem.to_string(),
        identity: Identity {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        },
    };
    m.server_config().err().map(|e| e.to_string())
}

/// Whether the first certificate of `ca_pem` signed `cert_pem`.
pub fn signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let (Ok(leaf), Ok(ca)) = (certs(cert_pem, "certificate"), certs(ca_pem, "CA")) else {
        return false;
    };
    let (Ok((_, leaf)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(leaf[0].as_ref()),
        x509_parser::parse_x509_certificate(ca[0].as_ref()),
    ) else {
        return false;
    };
    leaf.verify_signature(Some(ca.public_key())).is_ok()
}

/// Paths of a CA certificate, a certificate and its key on disk.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Write a file readable by its owner only (keys) or by everyone (certificates).
pub fn write_private(path: &Path, text: &str, private: bool) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A temporary name of its own per write: two writers of the same file
    // (two replicas asking for a backup at once) must not rename each
    // other's temporary file away.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

impl TlsPaths {
    /// `<dir>/<name>-ca.crt` (the CAs `name` trusts), `<dir>/<name>.crt`,
    /// `<dir>/<name>.key`.
    pub fn in_dir(dir: &Path, name: &str) -> TlsPaths {
        TlsPaths {
            ca: dir.join(format!("{name}-ca.crt")),
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        }
    }

    pub fn write(&self, ca: &Ca, id: &Identity) -> Result<(), TlsError> {
        write_private(&self.ca, &ca.identity.cert_pem, false)?;
        write_private(&self.cert, &id.cert_pem, false)?;
        write_private(&self.key, &id.key_pem, true)
    }

    pub fn load(&self) -> Result<Material, TlsError> {
        Ok(Material {
            ca_pem: read(&self.ca)?,
            identity: Identity {
                cert_pem: read(&self.cert)?,
                key_pem: read(&self.key)?,
            },
        })
    }
}

/// Everything one party needs for mutual TLS: the CA to trust and its own identity.
#[derive(Clone, Debug)]
pub struct Material {
    pub ca_pem: String,
    pub identity: Identity,
}

fn certs(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    let certs = certs.map_err(|e| TlsError::Pem {
        what: what.into(),
        detail: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what: what.into(),
            detail: "no certificate found".into(),
        });
    }
    Ok(certs)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        what: "private key".into(),
        detail: e.to_string(),
    })
}

fn roots(ca_pem: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certs(ca_pem, "CA certificate")? {
        roots.add(c)?;
    }
    Ok(roots)
}

impl Material {
    /// When the first of this party's certificate and the CA expires (Unix
    /// seconds); None when either cannot be read.
    pub fn expires_at(&self) -> Option<i64> {
        let not_after = |pem: &str| -> Option<i64> {
            let der = certs(pem, "certificate").ok()?.into_iter().next()?;
            let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
            Some(c.validity().not_after.timestamp())
        };
        Some(not_after(&self.identity.cert_pem)?.min(not_after(&self.ca_pem)?))
    }

    /// A server that demands a client certificate signed by the cluster CA.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(&self.ca_pem)?), provider())
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                certs(&self.identity.cert_pem, "certificate")?,
                key(&self.identity.key_pem)?,
            )?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// A client that trusts only the cluster CA and presents its own certificate.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let cfg = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots(&self.ca_pem)?)
            .with_client_auth_cert(
                certs(&self.identity.cert_pem, "certificate")?,
                key(&self.identity.key_pem)?,
            )?;
        Ok(Arc::new(cfg))
    }
}

/// A server presenting `identity` that asks for no client certificate
/// (its clients sign in otherwise, as `cnmysql donor`'s do).
pub fn server_config_without_client_auth(
    identity: &Identity,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(
            certs(&identity.cert_pem, "certificate")?,
            key(&identity.key_pem)?,
        )?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client that trusts only `ca_pem`, presenting `identity` when given.
pub fn client_config_trusting(
    ca_pem: &str,
    identity: Option<&Identity>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca_pem)?);
    let cfg = match identity {
        Some(id) => {
            builder.with_client_auth_cert(certs(&id.cert_pem, "certificate")?, key(&id.key_pem)?)?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

/// The common name of a verified peer certificate (its identity).
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

#[cfg(test)]
mod tests;
