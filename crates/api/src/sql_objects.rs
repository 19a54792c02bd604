//! Databases, users and grants declared as resources (`Database`, `User`,
//! `Grant`, as mariadb-operator's), each naming its Cluster. The Cluster's
//! primary is made to hold what they declare: missing ones are created,
//! changed ones altered, what was changed by hand put back (drift), and a
//! deleted resource's object dropped or kept as its `deletionPolicy` says.
//! Nothing that no resource declares is ever touched.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::SecretKeyRef;
use crate::backup_resources::ClusterRef;
use crate::field_error::FieldError;
use crate::sql_privileges::{grant_problems, system_database};

/// What happens in the server when the resource is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// The database, user or privileges stay.
    #[default]
    Keep,
    /// They are dropped (a database with its tables) or revoked.
    Delete,
}

/// A database (schema) on a Cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "SqlObjectStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatabaseSpec {
    pub cluster: ClusterRef,
    /// Its name in the server [default: the resource's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// [default: utf8mb4]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub character_set: Option<String>,
    /// [default: the character set's default collation]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collation: Option<String>,
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// What a user's connections must present (`REQUIRE`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequireSpec {
    /// TLS.
    #[serde(default)]
    pub ssl: bool,
    /// A client certificate a CA the server trusts issued.
    #[serde(default)]
    pub x509: bool,
    /// A client certificate of this issuer (implies x509).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// A client certificate with this subject (implies x509).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// Per-hour and concurrent limits of a user; absent means none.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_user_connections: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queries_per_hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_updates_per_hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_hour: Option<u32>,
}

/// An account on a Cluster, its password from a Secret.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "User",
    namespaced,
    status = "SqlObjectStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserSpec {
    pub cluster: ClusterRef,
    /// Its name in the server [default: the resource's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it may connect from [default: `%`, anywhere].
    #[serde(default = "any_host")]
    pub host: String,
    /// The password: set again whenever the Secret's value changes.
    pub password_secret_key_ref: SecretKeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<RequireSpec>,
    /// Resource limits; absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<UserLimits>,
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// Privileges of a user on a database (or every database), or on one table.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "Grant",
    namespaced,
    status = "SqlObjectStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster.name"}"#,
    printcolumn = r#"{"name":"User","type":"string","jsonPath":".spec.username"}"#,
    printcolumn = r#"{"name":"Database","type":"string","jsonPath":".spec.database"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantSpec {
    pub cluster: ClusterRef,
    /// E.g. `SELECT`, `INSERT`, `ALL PRIVILEGES`. The user holds exactly
    /// these at this level: others granted by hand are revoked.
    pub privileges: Vec<String>,
    /// A database, or `*` for every one.
    pub database: String,
    /// A table of it [default: `*`, every one].
    #[serde(default = "every_table")]
    pub table: String,
    /// The user's name in the server.
    pub username: String,
    #[serde(default = "any_host")]
    pub host: String,
    /// The user may grant these privileges on.
    #[serde(default)]
    pub grant_option: bool,
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

fn any_host() -> String {
    "%".into()
}
fn every_table() -> String {
    "*".into()
}

/// `spec.managed.adopt` of a Cluster: what may be adopted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdoptSpec {
    /// Databases a `Database` may take over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<String>,
    /// Accounts a `User` may take over (its password becomes the declared one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<AdoptedUser>,
}

/// An account by name and host.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdoptedUser {
    pub name: String,
    #[serde(default = "any_host")]
    pub host: String,
}

impl AdoptSpec {
    pub fn is_empty(&self) -> bool {
        self.databases.is_empty() && self.users.is_empty()
    }

    /// Whether the Cluster lists what `doc` declares for adoption.
    pub fn covers(&self, doc: &SqlObjectDoc) -> bool {
        let name = doc.name();
        match doc {
            SqlObjectDoc::Database(d) => {
                let n = d.spec.name_in_server(&name);
                self.databases.iter().any(|x| x == n)
            }
            SqlObjectDoc::User(u) => {
                let n = u.spec.name_in_server(&name);
                self.users
                    .iter()
                    .any(|x| x.name == n && x.host == u.spec.host)
            }
            SqlObjectDoc::Grant(_) => false,
        }
    }

    /// Its problems, each naming the field.
    pub fn check(&self, errors: &mut Vec<FieldError>) {
        for (i, d) in self.databases.iter().enumerate() {
            errors.extend(database_name_problems(
                d,
                &format!("spec.managed.adopt.databases[{i}]"),
            ));
        }
        for (i, u) in self.users.iter().enumerate() {
            let path = format!("spec.managed.adopt.users[{i}]");
            errors.extend(user_name_problems(&u.name, &format!("{path}.name")));
            if !is_host(&u.host) {
                field(
                    errors,
                    &format!("{path}.host"),
                    format!("{:?} is not a host", u.host),
                );
            }
        }
    }
}

/// How a Database, User or Grant was last carried out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SqlObjectStatus {
    /// `Ready`: True once the primary holds what the spec says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A User's password as last set (a salted digest, never the password):
    /// a different Secret value sets it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_digest: Option<String>,
}

/// Accounts the Cluster itself owns: never declared by a User.
pub const RESERVED_USERS: &[&str] = &[
    crate::names::ADMIN_USER,
    crate::names::REPLICATION_USER,
    crate::names::APP_USER,
    "mariadb.sys",
    "mysql.sys",
    "mysql.session",
    "mysql.infoschema",
    "PUBLIC",
];

fn is_identifier(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'-')
}

/// A user name: an identifier, with dots allowed inside.
fn is_user_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_$-.".contains(&b))
}

fn is_host(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".%_:-/".contains(&b))
}

/// A Secret's name as Kubernetes allows one (a DNS subdomain): never a
/// path (`..`, `/`) on the local platform, where a Secret is a directory.
pub fn is_secret_name(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    s.len() <= 253 && s.split('.').all(label_ok)
}

/// A key of a Secret as Kubernetes allows one: never `.` or `..`.
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

/// Whether `user` is one of the Cluster's own accounts.
pub fn is_reserved_user(user: &str) -> bool {
    RESERVED_USERS.iter().any(|r| r.eq_ignore_ascii_case(user))
}

fn field(errors: &mut Vec<FieldError>, path: &str, message: String) {
    errors.push(FieldError {
        field: path.into(),
        message,
    });
}

/// What is wrong with a database name a declaration gives (`path` names
/// the field).
pub fn database_name_problems(name: &str, path: &str) -> Vec<FieldError> {
    let mut e = Vec::new();
    if !is_identifier(name, 64) {
        field(
            &mut e,
            path,
            format!("{name:?} is not a database name: 1 to 64 letters, digits, '_', '$' or '-'"),
        );
    } else if let Some(s) = system_database(name) {
        field(
            &mut e,
            path,
            format!(
                "{name} is (or as a pattern matches) {s}, a database of the server's own: declare another"
            ),
        );
    }
    e
}

impl DatabaseSpec {
    /// Its name in the server, given the resource's.
    pub fn name_in_server<'a>(&'a self, resource: &'a str) -> &'a str {
        self.name.as_deref().unwrap_or(resource)
    }

    pub fn check(&self, resource: &str) -> Vec<FieldError> {
        let mut e = database_name_problems(self.name_in_server(resource), "spec.name");
        for (path, v) in [
            ("spec.characterSet", &self.character_set),
            ("spec.collation", &self.collation),
        ] {
            if let Some(v) = v.as_deref().filter(|v| !is_identifier(v, 64)) {
                field(
                    &mut e,
                    path,
                    format!("{v:?} is not a character set or collation name"),
                );
            }
        }
        e
    }
}

/// What is wrong with a declared user's name (`path` names the field).
pub fn user_name_problems(name: &str, path: &str) -> Vec<FieldError> {
    let mut e = Vec::new();
    if !is_user_name(name) {
        field(
            &mut e,
            path,
            format!("{name:?} is not a user name: 1 to 32 letters, digits, '_', '$', '-' or '.'"),
        );
    } else if is_reserved_user(name) {
        field(
            &mut e,
            path,
            format!(
                "{name} is an account the Cluster owns: declare another (a Grant may still give app privileges)"
            ),
        );
    }
    e
}

impl UserSpec {
    pub fn name_in_server<'a>(&'a self, resource: &'a str) -> &'a str {
        self.name.as_deref().unwrap_or(resource)
    }

    pub fn check(&self, resource: &str) -> Vec<FieldError> {
        let mut e = user_name_problems(self.name_in_server(resource), "spec.name");
        if !is_host(&self.host) {
            field(
                &mut e,
                "spec.host",
                format!(
                    "{:?} is not a host: a name, an address, or a pattern with % and _",
                    self.host
                ),
            );
        }
        let r = &self.password_secret_key_ref;
        if !is_secret_name(&r.name) {
            field(
                &mut e,
                "spec.passwordSecretKeyRef.name",
                format!(
                    "{:?} is not a Secret's name (lower-case letters, digits, '-' and '.')",
                    r.name
                ),
            );
        }
        if !is_secret_key(&r.key) {
            field(
                &mut e,
                "spec.passwordSecretKeyRef.key",
                format!(
                    "{:?} is not a key of a Secret (letters, digits, '-', '_' and '.')",
                    r.key
                ),
            );
        }
        if let Some(r) = &self.require {
            for (path, v) in [
                ("spec.require.issuer", &r.issuer),
                ("spec.require.subject", &r.subject),
            ] {
                if v.as_deref()
                    .is_some_and(|v| v.contains('\'') || v.contains('\\'))
                {
                    field(&mut e, path, "may not hold a quote or a backslash".into());
                }
            }
        }
        e
    }
}

impl GrantSpec {
    pub fn check(&self) -> Vec<FieldError> {
        let mut e = Vec::new();
        if self.privileges.is_empty() {
            field(
                &mut e,
                "spec.privileges",
                "names no privilege: name at least one, e.g. SELECT".into(),
            );
        }
        if self.database != "*" && !is_identifier(&self.database, 64) {
            field(
                &mut e,
                "spec.database",
                format!("{:?} is not a database name or *", self.database),
            );
        }
        if self.table != "*" && !is_identifier(&self.table, 64) {
            field(
                &mut e,
                "spec.table",
                format!("{:?} is not a table name or *", self.table),
            );
        }
        e.extend(grant_problems(
            &self.database,
            &self.table,
            &self.privileges,
            self.grant_option,
        ));
        if !is_user_name(&self.username) {
            field(
                &mut e,
                "spec.username",
                format!("{:?} is not a user name", self.username),
            );
        } else if is_reserved_user(&self.username) && self.username != crate::names::APP_USER {
            field(
                &mut e,
                "spec.username",
                format!("{} is an account the Cluster owns", self.username),
            );
        }
        if !is_host(&self.host) {
            field(
                &mut e,
                "spec.host",
                format!("{:?} is not a host", self.host),
            );
        }
        e
    }
}

/// A `Database`, `User` or `Grant`, as either platform holds one.
#[derive(Clone, Debug)]
pub enum SqlObjectDoc {
    Database(Database),
    User(User),
    Grant(Grant),
}

impl SqlObjectDoc {
    /// A document of a local manifest, when its kind is one of these:
    /// parsed and checked, errors naming the field.
    pub fn parse(kind: &str, doc: &str) -> Option<Result<SqlObjectDoc, Vec<FieldError>>> {
        fn read<T: serde::de::DeserializeOwned>(
            kind: &str,
            doc: &str,
        ) -> Result<T, Vec<FieldError>> {
            serde_saphyr::from_str(doc).map_err(|e| {
                vec![FieldError {
                    field: "spec".into(),
                    message: format!("is not a {kind}: {e}"),
                }]
            })
        }
        let parsed = match kind {
            "Database" => read(kind, doc).map(SqlObjectDoc::Database),
            "User" => read(kind, doc).map(SqlObjectDoc::User),
            "Grant" => read(kind, doc).map(SqlObjectDoc::Grant),
            _ => return None,
        };
        Some(parsed.and_then(|d| {
            let e = d.check();
            if e.is_empty() { Ok(d) } else { Err(e) }
        }))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            SqlObjectDoc::Database(_) => "Database",
            SqlObjectDoc::User(_) => "User",
            SqlObjectDoc::Grant(_) => "Grant",
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> String {
        let m = match self {
            SqlObjectDoc::Database(d) => &d.metadata,
            SqlObjectDoc::User(u) => &u.metadata,
            SqlObjectDoc::Grant(g) => &g.metadata,
        };
        m.name.clone().unwrap_or_default()
    }

    /// `Kind/name`: how status, events and results name it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.kind(), self.name())
    }

    /// The Cluster it is declared on.
    pub fn cluster(&self) -> &str {
        match self {
            SqlObjectDoc::Database(d) => &d.spec.cluster.name,
            SqlObjectDoc::User(u) => &u.spec.cluster.name,
            SqlObjectDoc::Grant(g) => &g.spec.cluster.name,
        }
    }

    pub fn deletion_policy(&self) -> DeletionPolicy {
        match self {
            SqlObjectDoc::Database(d) => d.spec.deletion_policy,
            SqlObjectDoc::User(u) => u.spec.deletion_policy,
            SqlObjectDoc::Grant(g) => g.spec.deletion_policy,
        }
    }

    /// Its spec's problems, each naming the field.
    pub fn check(&self) -> Vec<FieldError> {
        let name = self.name();
        match self {
            SqlObjectDoc::Database(d) => d.spec.check(&name),
            SqlObjectDoc::User(u) => u.spec.check(&name),
            SqlObjectDoc::Grant(g) => g.spec.check(),
        }
    }
}

#[cfg(test)]
mod tests;
