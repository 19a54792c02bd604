//! Replica clusters (`spec.replica`): a whole Cluster that follows another
//! MySQL or MariaDB server, typically the primary of a cnmysql Cluster in
//! another region, and can be promoted to stand on its own.
//!
//! Its designated primary (the instance in the primary's place) stays
//! read-only and replicates from the source over TLS with GTID
//! auto-positioning; its own replicas follow it as usual. The credentials
//! live in the Secret `<cluster>-replica-source` (keys `username`,
//! `password`, `ca.crt`, and `tls.crt` with `tls.key` for an account that
//! requires a client certificate); locally, in files of the same names
//! under `<secrets dir>/<cluster>-replica-source/`.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field_error::{FieldError, err};

/// `spec.replica`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplicaSpec {
    /// Follow the source (true), or stand on its own (false: writes open
    /// on the primary once the promotion token, if any, is applied).
    pub enabled: bool,
    /// The server to follow.
    pub source: ReplicaSource,
    /// A GTID set the designated primary must hold before a promotion
    /// (`enabled: false`) opens writes: the `status.replica.gtidPosition`
    /// the demoted source cluster reports, for a switchover between
    /// clusters that loses nothing. Without it, a promotion opens writes
    /// once what was received is applied (a disaster promotion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub promotion_token: Option<String>,
}

/// `spec.replica.source`: the source's endpoint (typically the rw Service
/// of the source Cluster, or its load balancer), or, where no network
/// path reaches it, the object store it archives its binary logs to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.objectStore) != (has(self.host) && self.host != '')").message("a source is a server (host) or a binlog archive (objectStore): name exactly one").field_path(".host"))]
pub struct ReplicaSource {
    /// Host name or IP address (unset with `objectStore`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub host: String,
    /// MySQL protocol port [default: 3306].
    #[serde(default = "default_port")]
    pub port: u16,
    /// The name the source's certificate must carry [default: `host`]:
    /// set it when `host` is an address or a name the certificate lacks
    /// (a ClusterIP, say; the source Cluster's certificates name its
    /// Services, e.g. `east-rw.east.svc`). The instance manager checks it
    /// before following; the server's own replication connection then
    /// checks the CA only (it can verify no name but `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub tls_server_name: Option<String>,
    /// Follow the source's binlog archive instead of a server: the store
    /// the source Cluster archives to (its `spec.backup.objectStore`), with
    /// `serverName` the source Cluster's name. The designated primary reads
    /// new archive pieces as they appear and applies them through its own
    /// applier (`archive_replica`); the archive trails the source's commits
    /// by about a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<crate::backup::ObjectStore>,
}

fn default_port() -> u16 {
    3306
}

impl ReplicaSource {
    /// `host:port`, as the status and the replication threads show it; for
    /// a binlog archive, its folder (`<destinationPath>/<serverName>`).
    pub fn address(&self) -> String {
        match &self.object_store {
            Some(o) => format!(
                "{}/{}",
                o.destination_path.trim_end_matches('/'),
                o.server_name.as_deref().unwrap_or_default()
            ),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// The Secret (locally: the folder under the secrets directory) with the
/// source's credentials.
pub fn source_secret(cluster: &str) -> String {
    format!("{cluster}-replica-source")
}

/// Keys of that Secret.
pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";
pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
/// An import's Secret, for `method: backup`: the token `cnmysql donor`
/// was given (`--token-file`).
pub const DONOR_TOKEN_KEY: &str = "donor-token";

/// `status.replica`: where a replica cluster stands, as the control plane
/// last saw its spec and its designated primary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The cluster follows its source (`spec.replica.enabled`).
    pub enabled: bool,
    /// The source, `host:port`.
    pub source: String,
    /// `spec.replica.source.tlsServerName`, for the instances to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// `spec.replica.promotionToken`, for the instances to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_token: Option<String>,
    /// `spec.replica.source.objectStore`, for the instances to read (it
    /// names Secrets, never holds them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<Box<crate::backup::ObjectStore>>,
    /// The designated primary's executed GTID set: after a demotion, the
    /// token the new primary cluster waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_position: Option<String>,
    /// How far the designated primary's applier is behind the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<u64>,
    /// The designated primary receives from the source now.
    #[serde(default)]
    pub receiving: bool,
    /// Why it does not, or why its applier stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `host` and `port` of a `host:port` source.
pub fn split_address(source: &str) -> Option<(&str, u16)> {
    let (host, port) = source.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// What is wrong with `spec.replica` and `spec.mysql.serverIdBase`.
pub fn check_spec(s: &crate::ClusterSpec, errors: &mut Vec<FieldError>) {
    if let Some(r) = &s.replica {
        check(r, s.mysql.flavor, errors);
    }
    let last = u64::from(s.mysql.server_id_base) + u64::from(s.instances.max(0) as u32);
    if last >= u64::from(u32::MAX) {
        errors.push(err(
            "spec.mysql.serverIdBase",
            "leaves no room for the instances' server ids; lower it",
        ));
    }
}

/// What is wrong with a source's address (`field` names it).
pub fn check_source(s: &ReplicaSource, field: &str, errors: &mut Vec<FieldError>) {
    if s.host.is_empty() || s.host.contains(char::is_whitespace) || s.host.contains('/') {
        errors.push(err(
            format!("{field}.host"),
            format!(
                "{:?} is not a host name or address; name the source's endpoint, e.g. db-rw.other-namespace",
                s.host
            ),
        ));
    }
    if s.port == 0 {
        errors.push(err(format!("{field}.port"), "must be 1 to 65535"));
    }
}

/// What is wrong with a source that is a binlog archive.
fn check_archive(s: &ReplicaSource, o: &crate::backup::ObjectStore, errors: &mut Vec<FieldError>) {
    const F: &str = "spec.replica.source";
    if !s.host.is_empty() || s.tls_server_name.is_some() {
        errors.push(err(
            format!("{F}.host"),
            "a source is a server (host) or a binlog archive (objectStore), not both; remove one",
        ));
    }
    if o.server_name.as_deref().is_none_or(str::is_empty) {
        errors.push(err(
            format!("{F}.objectStore.serverName"),
            "name the source Cluster whose binlog archive to follow (its name, or its spec.backup.objectStore.serverName)",
        ));
    }
    if o.destination_path.is_empty() {
        errors.push(err(
            format!("{F}.objectStore.destinationPath"),
            "name the store the source Cluster archives to, e.g. s3://bucket/prefix",
        ));
    }
}

/// What is wrong with `spec.replica` (`flavor` parses the token).
pub fn check(r: &ReplicaSpec, flavor: crate::Flavor, errors: &mut Vec<FieldError>) {
    match &r.source.object_store {
        None => check_source(&r.source, "spec.replica.source", errors),
        Some(o) => check_archive(&r.source, o, errors),
    }
    if let Some(t) = &r.promotion_token {
        let ok = match flavor {
            crate::Flavor::Mysql => t.split(',').all(|p| {
                let p = p.trim();
                p.is_empty()
                    || p.split_once(':')
                        .is_some_and(|(uuid, ranges)| uuid.len() == 36 && !ranges.is_empty())
            }),
            crate::Flavor::Mariadb => t.split(',').all(|p| {
                let p = p.trim();
                p.is_empty()
                    || p.split('-').count() == 3
                        && p.split('-')
                            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            }),
        };
        if !ok {
            errors.push(err(
                "spec.replica.promotionToken",
                format!(
                    "{t:?} is not a {} GTID set; copy status.replica.gtidPosition of the demoted source cluster",
                    flavor.as_str()
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(host: &str, token: Option<&str>) -> ReplicaSpec {
        ReplicaSpec {
            enabled: true,
            source: ReplicaSource {
                host: host.into(),
                port: 3306,
                tls_server_name: None,
                object_store: None,
            },
            promotion_token: token.map(str::to_string),
        }
    }

    fn fields(r: &ReplicaSpec, f: crate::Flavor) -> Vec<String> {
        let mut e = Vec::new();
        check(r, f, &mut e);
        e.into_iter().map(|e| e.field).collect::<Vec<_>>()
    }

    #[test]
    fn an_archive_source_names_its_store_and_no_server() {
        let mut r = spec("", None);
        r.source.object_store = Some(crate::backup::ObjectStore {
            destination_path: "s3://dr/backups".into(),
            server_name: Some("east".into()),
            ..Default::default()
        });
        assert!(fields(&r, crate::Flavor::Mysql).is_empty());
        assert_eq!(r.source.address(), "s3://dr/backups/east");
        r.source.host = "east-rw".into();
        r.source.object_store.as_mut().unwrap().server_name = None;
        assert_eq!(
            fields(&r, crate::Flavor::Mariadb),
            [
                "spec.replica.source.host",
                "spec.replica.source.objectStore.serverName"
            ]
        );
    }

    #[test]
    fn bad_hosts_and_tokens_name_their_field() {
        assert!(fields(&spec("db-rw.east", None), crate::Flavor::Mysql).is_empty());
        assert_eq!(
            fields(&spec("db rw", None), crate::Flavor::Mysql),
            ["spec.replica.source.host"]
        );
        assert!(fields(&spec("h", Some("0-1-10,1-2-3")), crate::Flavor::Mariadb).is_empty());
        assert_eq!(
            fields(&spec("h", Some("0-1")), crate::Flavor::Mariadb),
            ["spec.replica.promotionToken"]
        );
        assert!(
            fields(
                &spec("h", Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")),
                crate::Flavor::Mysql
            )
            .is_empty()
        );
        assert_eq!(
            fields(&spec("h", Some("0-1-10")), crate::Flavor::Mysql),
            ["spec.replica.promotionToken"]
        );
    }
}
