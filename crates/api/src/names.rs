//! Names and labels shared by every platform (DESIGN §1).

/// API group of our resources.
pub const GROUP: &str = "mysql.cnmysql.io";
/// Prefix of our labels and annotations.
pub const LABEL_PREFIX: &str = "cnmysql.io/";
/// The label naming the cluster a Pod, claim or Service belongs to.
pub const CLUSTER_LABEL: &str = "cnmysql.io/cluster";
/// Header that carries the expected SHA-256 of an uploaded manager binary.
pub const MANAGER_HASH_HEADER: &str = "X-CNMSQL-Manager-Hash";
/// Environment variable through which a re-exec'd manager learns the PID of
/// the mysqld it adopts.
pub const ADOPT_MYSQLD_PID_ENV: &str = "CNMYSQL_ADOPT_MYSQLD_PID";
/// Port the server listens on inside a pod, and the port of every Service.
pub const MYSQL_PORT: u16 = 3306;
/// Port of the instance manager's control API inside a pod.
pub const CONTROL_PORT: u16 = 8000;
/// Port of the plain-HTTP probe endpoints (`/healthz`, `/readyz`) inside a
/// pod: the kubelet presents no client certificate, so probes cannot use the
/// mutual-TLS control port.
pub const PROBE_PORT: u16 = 8001;
/// Account used by replicas; it requires an X509 client certificate.
pub const REPLICATION_USER: &str = "cnmysql_replication";
/// Account the instance manager uses on its own server (local socket only).
pub const ADMIN_USER: &str = "root";
/// Account created for applications.
pub const APP_USER: &str = "app";
/// The database made at bootstrap for the application, owned by `app`
/// (whose privileges are limited to it).
pub const APP_DATABASE: &str = "app";
/// Pod annotation asking the operator to restart the instance manager in
/// place (re-exec; mysqld keeps running). Its value names the request
/// (`kubectl cnmsql restart-inplace` writes the current time).
pub const RESTART_INPLACE_ANNOTATION: &str = "cnmysql.io/restartInPlace";
/// Pod annotation the operator sets to the request it carried out.
pub const RESTARTED_INPLACE_ANNOTATION: &str = "cnmysql.io/restartedInPlace";
/// Pod annotation the operator sets, beside the one above, when the
/// manager refused or could not be reached; removed on success.
pub const RESTART_INPLACE_ERROR_ANNOTATION: &str = "cnmysql.io/restartInPlaceError";
/// Common name of the operator's client certificate.
pub const OPERATOR_IDENTITY: &str = "cnmysql-operator";

/// The namespace the local platform's clusters are known in (their
/// certificates' identities and subjects name it).
pub const LOCAL_NAMESPACE: &str = "local";

/// The identity a certificate of `cluster` in `namespace` names its party
/// by (a URI subject alternative name): the operator, or an instance.
/// A control API accepts a caller by this, never by a common name alone,
/// so a certificate for another cluster or namespace from a shared issuer
/// gets nothing.
pub fn identity(namespace: &str, cluster: &str, who: &str) -> String {
    let party = if who == OPERATOR_IDENTITY {
        "operator".to_string()
    } else {
        format!("instance/{who}")
    };
    format!("spiffe://cnmysql.io/ns/{namespace}/cluster/{cluster}/{party}")
}

/// The subject a certificate of `who` is issued with: its common name and
/// organizational unit. Every instance of a cluster has the same one
/// (the cluster's name, in its namespace), which the replication account
/// requires: a certificate of another cluster has another.
pub fn subject(namespace: &str, cluster: &str, who: &str) -> (String, Option<String>) {
    if who == OPERATOR_IDENTITY {
        (OPERATOR_IDENTITY.to_string(), None)
    } else {
        (cluster.to_string(), Some(namespace.to_string()))
    }
}

/// `<cluster>-<ordinal>`.
pub fn instance_name(cluster: &str, ordinal: u32) -> String {
    format!("{cluster}-{ordinal}")
}

/// The ordinal of an instance of `cluster`, if `name` is one.
pub fn ordinal_of(cluster: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(cluster)?.strip_prefix('-')?;
    if rest.is_empty() || rest.starts_with('0') || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok().filter(|n| *n >= 1)
}

/// `<cluster>-<suffix>`: Services (`rw`, `ro`, `r`, additional) and the Lease.
pub fn service_name(cluster: &str, suffix: &str) -> String {
    format!("{cluster}-{suffix}")
}

/// `<cluster>-primary`.
pub fn lease_name(cluster: &str) -> String {
    format!("{cluster}-primary")
}

/// The Secret of the cluster's certificate authority.
pub fn ca_secret(cluster: &str) -> String {
    format!("{cluster}-ca")
}
/// The Secret of an instance's certificate.
pub fn instance_tls_secret(instance: &str) -> String {
    format!("{instance}-tls")
}
/// The Secret of the operator's client certificate for `cluster`.
pub fn operator_tls_secret(cluster: &str) -> String {
    format!("{cluster}-operator-tls")
}
/// The replication account's password.
pub fn replication_secret(cluster: &str) -> String {
    format!("{cluster}-replication")
}
/// The `app` account's password, unless `spec.secrets.appSecret` names another.
pub fn app_secret(cluster: &str) -> String {
    format!("{cluster}-app")
}
/// The administrator's password, unless `spec.secrets.rootSecret` names another.
pub fn root_secret(cluster: &str) -> String {
    format!("{cluster}-root")
}

/// Where the bootstrap-controller puts the manager.
pub const MANAGER_PATH: &str = "/controller/manager";

/// How long an issued certificate is valid unless
/// `spec.secrets.certificateLifetimeSeconds` says otherwise: 90 days.
pub const CERTIFICATE_LIFETIME_SECONDS: i64 = 90 * 86_400;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_of("db", "db-1"), Some(1));
        assert_eq!(ordinal_of("db", "db-12"), Some(12));
        assert_eq!(ordinal_of("db", "db-0"), None);
        assert_eq!(ordinal_of("db", "db-01"), None);
        assert_eq!(ordinal_of("db", "dbx-1"), None);
        assert_eq!(ordinal_of("db-1", "db-1-2"), Some(2));
        assert_eq!(ordinal_of("db", "db-"), None);
        assert_eq!(instance_name("db", 3), "db-3");
        assert_eq!(lease_name("db"), "db-primary");
    }

    #[test]
    fn identities_name_the_namespace_the_cluster_and_the_party() {
        assert_eq!(
            identity("prod", "db", "db-2"),
            "spiffe://cnmysql.io/ns/prod/cluster/db/instance/db-2"
        );
        assert_eq!(
            identity("prod", "db", OPERATOR_IDENTITY),
            "spiffe://cnmysql.io/ns/prod/cluster/db/operator"
        );
        assert_eq!(
            subject("prod", "db", "db-2"),
            ("db".into(), Some("prod".into()))
        );
        assert_eq!(subject("prod", "db", OPERATOR_IDENTITY).1, None);
    }
}
