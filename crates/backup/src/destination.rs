//! Where a Cluster's backups go (`spec.backup.objectStore`): its
//! `destinationPath` read into a store and a prefix inside it, the
//! connection settings and credentials applied. Every store is reached
//! through the `object_store` crate; a bad path or a missing credential is
//! refused naming the field and the fix.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore as Store;
use object_store::path::Path;

use cnmysql_api::backup::{ObjectStore, SecretKeyRef};

const FIELD: &str = "spec.backup.objectStore.destinationPath";

/// What kind of store a destination path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    S3 { bucket: String },
    Gcs { bucket: String },
    Azure { container: String },
    File { dir: std::path::PathBuf },
}

/// A destination path read: the kind of store and the prefix inside it
/// (no leading or trailing slash; empty for the store's root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub kind: Kind,
    pub prefix: String,
}

/// Read `destinationPath`.
pub fn parse(path: &str) -> Result<Parsed, String> {
    let how = "write it as s3://bucket/prefix, gs://bucket/prefix, azure://container/prefix or file:///directory";
    let bad = |why: String| format!("{FIELD}: {why}; {how}");
    let (scheme, rest) = path
        .split_once("://")
        .ok_or_else(|| bad(format!("{path:?} has no scheme")))?;
    if scheme == "file" {
        if !rest.starts_with('/') {
            return Err(bad(format!("file://{rest} is not an absolute directory")));
        }
        return Ok(Parsed {
            kind: Kind::File {
                dir: std::path::PathBuf::from(rest),
            },
            prefix: String::new(),
        });
    }
    let (first, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if first.is_empty() {
        return Err(bad(format!("{path:?} names no bucket or container")));
    }
    let prefix = prefix.trim_matches('/').to_string();
    if prefix.split('/').any(|p| p == "." || p == "..") {
        return Err(bad(format!("{path:?}: the prefix may not hold . or ..")));
    }
    let kind = match scheme {
        "s3" => Kind::S3 {
            bucket: first.into(),
        },
        "gs" => Kind::Gcs {
            bucket: first.into(),
        },
        "azure" => Kind::Azure {
            container: first.into(),
        },
        other => return Err(bad(format!("{other}:// is not a store cnmysql knows"))),
    };
    Ok(Parsed { kind, prefix })
}

/// Secret values the platform read for a destination, by reference. Its
/// `Debug` shows the references, never the values.
#[derive(Clone, Default)]
pub struct Secrets(BTreeMap<SecretKeyRef, String>);

impl Secrets {
    pub fn insert(&mut self, r: SecretKeyRef, value: String) {
        self.0.insert(r, value);
    }

    /// The values `spec` names, read from `<dir>/<name>/<key>` (a Secret
    /// mounted as a volume, or the local platform's secrets directory).
    /// A missing file is left out: `open` names it with its field.
    pub fn from_dir(spec: &ObjectStore, dir: &std::path::Path) -> Secrets {
        let mut out = Secrets::default();
        for r in spec.secret_refs() {
            if let Ok(v) = std::fs::read_to_string(dir.join(&r.name).join(&r.key)) {
                out.insert(r.clone(), v.trim_end_matches(['\n', '\r']).to_string());
            }
        }
        out
    }

    fn get(&self, field: &str, r: &SecretKeyRef) -> Result<String, String> {
        self.0.get(r).cloned().ok_or_else(|| {
            format!(
                "spec.backup.objectStore.{field}: key {} of Secret {} was not found: create it, or name one that exists",
                r.key, r.name
            )
        })
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.0
                    .keys()
                    .map(|k| format!("{}/{}: <redacted>", k.name, k.key)),
            )
            .finish()
    }
}

/// An opened destination: the store, and where inside it this Cluster's
/// objects live.
#[derive(Clone, Debug)]
pub struct Destination {
    pub store: Arc<dyn Store>,
    pub prefix: Path,
    /// The destination path as declared, for messages (it holds no secret).
    pub path: String,
}

impl Destination {
    /// The same store, `name` deeper.
    pub fn under(&self, name: &str) -> Destination {
        Destination {
            store: self.store.clone(),
            prefix: self.key(name),
            path: format!("{}/{name}", self.path.trim_end_matches('/')),
        }
    }
    /// The path of `name` (`a/b`) under this destination's prefix.
    pub fn key(&self, name: &str) -> Path {
        let mut parts: Vec<String> = self
            .prefix
            .parts()
            .map(|p| p.as_ref().to_string())
            .collect();
        parts.extend(
            name.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string),
        );
        Path::from_iter(parts)
    }
}

/// Whether this machine has a certificate store to verify a store's TLS
/// with (`SSL_CERT_FILE` / `SSL_CERT_DIR` or the system's); a server image
/// may have none. Read once.
fn system_certificates() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(|| {
        let found = !rustls_native_certs::load_native_certs().certs.is_empty();
        if !found {
            tracing::info!(
                "no system certificate store: object stores are verified against Mozilla's roots and the endpoint CA"
            );
        }
        found
    })
}

/// Open `spec` with the secret values it names.
pub fn open(spec: &ObjectStore, secrets: &Secrets) -> Result<Destination, String> {
    let parsed = parse(&spec.destination_path)?;
    let fail = |e: object_store::Error| {
        format!(
            "spec.backup.objectStore: {} cannot be used: {e}",
            spec.destination_path
        )
    };
    // A store that hangs fails a request within 30 s, and retries stop
    // after 20 s: the archiver retries every second by itself, and
    // its status must say the store is unreachable while it is.
    let mut options = object_store::ClientOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(5))
        .with_timeout(std::time::Duration::from_secs(30));
    let retry = object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(20),
        ..Default::default()
    };
    if !system_certificates() {
        // reqwest's platform verifier cannot start without them: trust
        // Mozilla's roots (and the endpoint CA) instead.
        options = options.with_no_system_certificates(true);
        for der in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
            if let Ok(cert) = object_store::Certificate::from_der(der.as_ref()) {
                options = options.with_root_certificate(cert);
            }
        }
    }
    if let Some(ca) = &spec.endpoint_ca {
        let pem = secrets.get("endpointCA", ca)?;
        for cert in object_store::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
            format!("spec.backup.objectStore.endpointCA: not a PEM certificate bundle: {e}")
        })? {
            options = options.with_root_certificate(cert);
        }
    }
    // An endpoint of one's own may be plain HTTP (a test server, a store
    // inside the cluster).
    let plain_http = spec
        .endpoint_url
        .as_deref()
        .is_some_and(|u| u.starts_with("http://"));
    let store: Arc<dyn Store> = match &parsed.kind {
        Kind::File { dir } => {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{FIELD}: {} cannot be created: {e}", dir.display()))?;
            Arc::new(
                object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(fail)?
                    .with_automatic_cleanup(true),
            )
        }
        Kind::S3 { bucket } => {
            let mut b = object_store::aws::AmazonS3Builder::new()
                .with_retry(retry.clone())
                .with_bucket_name(bucket)
                .with_region(spec.region.clone().unwrap_or_else(|| "us-east-1".into()))
                .with_virtual_hosted_style_request(!spec.path_style)
                .with_client_options(options.with_allow_http(plain_http));
            if let Some(e) = &spec.endpoint_url {
                b = b.with_endpoint(e);
            }
            let c = spec.s3_credentials.as_ref().ok_or_else(|| {
                "spec.backup.objectStore.s3Credentials: an s3:// destination needs accessKeyId and secretAccessKey".to_string()
            })?;
            b = b
                .with_access_key_id(secrets.get("s3Credentials.accessKeyId", &c.access_key_id)?)
                .with_secret_access_key(
                    secrets.get("s3Credentials.secretAccessKey", &c.secret_access_key)?,
                );
            if let Some(t) = &c.session_token {
                b = b.with_token(secrets.get("s3Credentials.sessionToken", t)?);
            }
            Arc::new(b.build().map_err(fail)?)
        }
        Kind::Gcs { bucket } => {
            let c = spec.google_credentials.as_ref().ok_or_else(|| {
                "spec.backup.objectStore.googleCredentials: a gs:// destination needs applicationCredentials".to_string()
            })?;
            Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::new()
                    .with_retry(retry.clone())
                    .with_bucket_name(bucket)
                    .with_service_account_key(secrets.get(
                        "googleCredentials.applicationCredentials",
                        &c.application_credentials,
                    )?)
                    .with_client_options(options)
                    .build()
                    .map_err(fail)?,
            )
        }
        Kind::Azure { container } => {
            let c = spec.azure_credentials.as_ref().ok_or_else(|| {
                "spec.backup.objectStore.azureCredentials: an azure:// destination needs storageAccount and storageKey".to_string()
            })?;
            let mut b = object_store::azure::MicrosoftAzureBuilder::new()
                .with_retry(retry)
                .with_account(secrets.get("azureCredentials.storageAccount", &c.storage_account)?)
                .with_access_key(secrets.get("azureCredentials.storageKey", &c.storage_key)?)
                .with_container_name(container)
                .with_client_options(options.with_allow_http(plain_http));
            // Another endpoint than `https://<account>.blob.core.windows.net`
            // (Azure Stack, Azurite): the account's URL, with the account
            // in its path where the server wants it there.
            if let Some(e) = &spec.endpoint_url {
                b = b.with_endpoint(e.clone());
            }
            Arc::new(b.build().map_err(fail)?)
        }
    };
    Ok(Destination {
        store,
        prefix: Path::from(parsed.prefix.as_str()),
        path: spec.destination_path.clone(),
    })
}

/// Open the folder of one Cluster's backups: `serverName` (or `cluster`)
/// under the destination, with credentials read from `secrets_dir`.
pub fn open_for_cluster(
    spec: &ObjectStore,
    secrets_dir: Option<&std::path::Path>,
    cluster: &str,
) -> Result<Destination, String> {
    let secrets = secrets_dir
        .map(|d| Secrets::from_dir(spec, d))
        .unwrap_or_default();
    let dest = open(spec, &secrets)?;
    Ok(dest.under(spec.server_name.as_deref().unwrap_or(cluster)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_parses_and_a_bad_path_says_how_to_write_it() {
        assert_eq!(
            parse("s3://backups/prod/db/").unwrap(),
            Parsed {
                kind: Kind::S3 {
                    bucket: "backups".into()
                },
                prefix: "prod/db".into()
            }
        );
        assert_eq!(
            parse("gs://b").unwrap().kind,
            Kind::Gcs { bucket: "b".into() }
        );
        assert_eq!(
            parse("azure://c/p").unwrap(),
            Parsed {
                kind: Kind::Azure {
                    container: "c".into()
                },
                prefix: "p".into()
            }
        );
        assert_eq!(
            parse("file:///var/backups").unwrap().kind,
            Kind::File {
                dir: "/var/backups".into()
            }
        );
        for bad in [
            "backups",
            "s3://",
            "s3:///x",
            "ftp://h/x",
            "file://rel",
            "s3://b/../x",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.starts_with(FIELD) && e.contains("write it as"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_missing_credential_names_its_field_and_secrets_never_print() {
        let spec = ObjectStore {
            destination_path: "s3://b/p".into(),
            ..Default::default()
        };
        let e = open(&spec, &Secrets::default()).unwrap_err();
        assert!(e.contains("s3Credentials"), "{e}");
        let r = SecretKeyRef {
            name: "store".into(),
            key: "ACCESS_KEY_ID".into(),
        };
        let spec = ObjectStore {
            s3_credentials: Some(cnmysql_api::backup::S3Credentials {
                access_key_id: r.clone(),
                secret_access_key: SecretKeyRef {
                    name: "store".into(),
                    key: "SECRET".into(),
                },
                session_token: None,
            }),
            ..spec
        };
        let mut secrets = Secrets::default();
        secrets.insert(r, "AKIDVERYSECRET".into());
        let e = open(&spec, &secrets).unwrap_err();
        assert!(
            e.contains("s3Credentials.secretAccessKey") && e.contains("SECRET"),
            "{e}"
        );
        assert!(!format!("{secrets:?}").contains("AKIDVERYSECRET"));
    }
}
