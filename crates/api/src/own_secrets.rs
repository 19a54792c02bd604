//! The Secrets a Cluster itself uses: its passwords, its certificates and
//! CA, its stores' credentials, its import and replica sources. A
//! declared `User` may never take its password from one of them (its
//! account would share the administrator's password, or a store's key),
//! and the refusal depends on the name alone, so that it tells nothing of
//! which Secrets exist.

use std::collections::BTreeSet;

use crate::ClusterSpec;
use crate::names;

/// The names of the Secrets `cluster` (with `spec`) uses, but for its
/// instances' certificates, which [`is_own_secret`] tells by their form.
pub fn own_secrets(cluster: &str, spec: &ClusterSpec) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = [
        names::ca_secret(cluster),
        names::operator_tls_secret(cluster),
        names::replication_secret(cluster),
        names::app_secret(cluster),
        names::root_secret(cluster),
        crate::import::import_secret(cluster),
        crate::replica::source_secret(cluster),
    ]
    .into();
    let s = &spec.secrets;
    out.extend(
        [
            &s.app_secret,
            &s.root_secret,
            &s.ca_secret,
            &s.server_tls_secret,
        ]
        .into_iter()
        .flatten()
        .cloned(),
    );
    let stores = spec
        .backup
        .iter()
        .map(|b| &b.object_store)
        .chain(spec.recovery().and_then(|r| r.source.object_store.as_ref()))
        .chain(
            spec.replica
                .as_ref()
                .and_then(|r| r.source.object_store.as_ref()),
        )
        .chain(spec.import().and_then(|i| i.source.object_store.as_ref()));
    for store in stores {
        out.extend(store.secret_refs().into_iter().map(|r| r.name.clone()));
    }
    out
}

/// Whether `secret` is one `cluster` uses (see [`own_secrets`]), or an
/// instance's certificate of it (`<cluster>-<ordinal>-tls`).
pub fn is_own_secret(cluster: &str, spec: &ClusterSpec, secret: &str) -> bool {
    let instance_cert = secret
        .strip_suffix("-tls")
        .is_some_and(|i| names::ordinal_of(cluster, i).is_some());
    instance_cert || own_secrets(cluster, spec).contains(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clusters_own_secrets_are_told_by_name() {
        let spec: ClusterSpec = serde_saphyr::from_str(
            "instances: 3\nsecrets: {rootSecret: prod-admin}\nbackup:\n  objectStore:\n    destinationPath: s3://b/p\n    s3Credentials:\n      accessKeyId: {name: store-keys, key: id}\n      secretAccessKey: {name: store-keys, key: secret}\n",
        )
        .unwrap();
        for s in [
            "db-root",
            "db-app",
            "db-replication",
            "db-ca",
            "db-operator-tls",
            "db-2-tls",
            "db-17-tls",
            "db-import-source",
            "db-replica-source",
            "prod-admin",
            "store-keys",
        ] {
            assert!(is_own_secret("db", &spec, s), "{s}");
        }
        for s in ["shop-pw", "db-0-tls", "other-root", "db-x-tls", "db"] {
            assert!(!is_own_secret("db", &spec, s), "{s}");
        }
    }
}
