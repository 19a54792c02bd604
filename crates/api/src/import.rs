//! `spec.bootstrap.import`: a new Cluster's first primary takes its data
//! from a server outside the operator, over TLS, with the account of the
//! Secret `<cluster>-import-source`; with `spec.replica` naming the same
//! server the Cluster then keeps following it until the cut-over.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field_error::{FieldError, err};
use crate::replica::ReplicaSource;

/// How the data is copied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ImportMethod {
    /// MySQL's clone plugin: a physical copy of the whole server, which must
    /// run the same MySQL version and load the clone plugin.
    Clone,
    /// A consistent logical dump of the user databases, loaded into a new
    /// server: any version the server here can read.
    Logical,
    /// MariaDB: a physical copy of the whole server by `mariadb-backup`,
    /// streamed by `cnmysql donor` running on the source's host; the same
    /// MariaDB series on both sides.
    Backup,
}

/// Where `cnmysql donor` listens by default: the port of MariaDB's
/// state transfers.
pub const DEFAULT_DONOR_PORT: u16 = 4444;

/// `spec.bootstrap.import`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportSpec {
    /// The server to copy (its address as this cluster reaches it).
    pub source: ReplicaSource,
    /// `clone` or `logical` [default: `clone` on MySQL, `logical` on
    /// MariaDB, which has no clone plugin].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ImportMethod>,
    /// `logical` only: the databases to copy [default: every database but
    /// the server's own (`mysql`, `sys`, `information_schema`,
    /// `performance_schema`)].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub databases: Vec<String>,
    /// `backup` only: the port `cnmysql donor` listens on at the source's
    /// host [default: 4444].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub donor_port: Option<u16>,
}

impl ImportSpec {
    /// Where the donor of a `backup` import listens.
    pub fn donor_port(&self) -> u16 {
        self.donor_port.unwrap_or(DEFAULT_DONOR_PORT)
    }

    pub fn method(&self, flavor: crate::Flavor) -> ImportMethod {
        self.method.unwrap_or(match flavor {
            crate::Flavor::Mysql => ImportMethod::Clone,
            crate::Flavor::Mariadb => ImportMethod::Logical,
        })
    }
}

/// The Secret (locally: the folder under the secrets directory) with the
/// import source's account: `username`, `password`, `ca.crt`, and
/// `tls.crt`/`tls.key` for an account that requires a client certificate.
pub fn import_secret(cluster: &str) -> String {
    format!("{cluster}-import-source")
}

/// Databases a logical import never copies: the server's own.
pub const SYSTEM_DATABASES: [&str; 4] =
    ["mysql", "sys", "information_schema", "performance_schema"];

/// What is wrong with `spec.bootstrap.import`.
pub fn check_spec(s: &crate::ClusterSpec, errors: &mut Vec<FieldError>) {
    let Some(i) = s.bootstrap.as_ref().and_then(|b| b.import.as_ref()) else {
        return;
    };
    const F: &str = "spec.bootstrap.import";
    if s.recovery().is_some() {
        errors.push(err(
            F,
            "a Cluster is recovered or imported, not both: remove spec.bootstrap.recovery or spec.bootstrap.import",
        ));
    }
    crate::replica::check_source(&i.source, &format!("{F}.source"), errors);
    if i.source.object_store.is_some() {
        errors.push(err(
            format!("{F}.source.objectStore"),
            "an import copies a running server; to start from another Cluster's backups use spec.bootstrap.recovery",
        ));
    }
    let method = i.method(s.mysql.flavor);
    if method == ImportMethod::Clone && s.mysql.flavor == crate::Flavor::Mariadb {
        errors.push(err(
            format!("{F}.method"),
            "MariaDB has no clone plugin: use logical",
        ));
    }
    if method == ImportMethod::Backup && s.mysql.flavor == crate::Flavor::Mysql {
        errors.push(err(
            format!("{F}.method"),
            "backup is MariaDB's physical copy: MySQL's is clone",
        ));
    }
    if method != ImportMethod::Logical && !i.databases.is_empty() {
        errors.push(err(
            format!("{F}.databases"),
            "a physical copy takes the whole server: remove databases, or use method: logical",
        ));
    }
    if method != ImportMethod::Backup && i.donor_port.is_some() {
        errors.push(err(
            format!("{F}.donorPort"),
            "only a backup import has a donor: remove donorPort, or use method: backup",
        ));
    }
    for (n, d) in i.databases.iter().enumerate() {
        if let Some(why) = database_problem(d) {
            errors.push(err(format!("{F}.databases[{n}]"), why));
        }
    }
}

/// Why `name` (given, or found on the source) is no database a logical
/// import copies: a name that could be taken for a path or an option of
/// the dump program, or a system database. None when it is one.
pub fn database_problem(name: &str) -> Option<String> {
    let bad = name.is_empty()
        || name.len() > 64
        || name.starts_with('-')
        || name.contains(['`', '/', '\\', '.'])
        || name.chars().any(char::is_control);
    if bad || SYSTEM_DATABASES.contains(&name.to_ascii_lowercase().as_str()) {
        Some(format!(
            "{name:?} is not a user database to copy (1 to 64 characters, no leading '-', no '`', '/', '\\\\', '.' or control character, not a system database)"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    fn problems(flavor: &str, import: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  instances: 2\n  mysql:\n    flavor: {flavor}\n  bootstrap:\n{import}"
        );
        match crate::validation::parse_cluster(&text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|f| f.field.clone()).collect(),
        }
    }

    #[test]
    fn an_import_names_a_reachable_source_and_a_method_the_flavour_has() {
        let ok = "    import:\n      source:\n        host: old-db.example\n";
        assert!(problems("mysql", ok).is_empty());
        assert!(problems("mariadb", ok).is_empty());
        let spec: crate::ClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": 1,
            "mysql": {"flavor": "mariadb"},
            "bootstrap": {"import": {"source": {"host": "h"}}}
        }))
        .unwrap();
        let i = spec.import().unwrap();
        assert_eq!(
            i.method(crate::Flavor::Mariadb),
            super::ImportMethod::Logical
        );
        assert_eq!(i.method(crate::Flavor::Mysql), super::ImportMethod::Clone);
        assert_eq!(i.source.port, 3306);
        assert_eq!(
            problems(
                "mariadb",
                "    import:\n      source:\n        host: h\n      method: clone\n"
            ),
            ["spec.bootstrap.import.method"]
        );
        assert_eq!(
            problems(
                "mysql",
                "    import:\n      source:\n        host: h\n      databases: [shop]\n"
            ),
            ["spec.bootstrap.import.databases"]
        );
        assert_eq!(
            problems(
                "mysql",
                "    import:\n      source:\n        host: h\n      method: logical\n      databases: [shop, mysql, 'a.b']\n"
            ),
            [
                "spec.bootstrap.import.databases[1]",
                "spec.bootstrap.import.databases[2]"
            ]
        );
        assert_eq!(
            problems("mysql", "    import:\n      source:\n        host: 'a b'\n"),
            ["spec.bootstrap.import.source.host"]
        );
        assert_eq!(
            problems(
                "mysql",
                "    import:\n      source:\n        host: h\n    recovery:\n      source:\n        objectStore:\n          destinationPath: file:///tmp/x\n          serverName: old\n"
            ),
            ["spec.bootstrap.import"]
        );
    }

    #[test]
    fn a_backup_import_is_mariadb_s_and_alone_names_a_donor_port() {
        let backup = "    import:\n      source:\n        host: h\n      method: backup\n";
        assert!(problems("mariadb", backup).is_empty());
        assert_eq!(problems("mysql", backup), ["spec.bootstrap.import.method"]);
        assert!(problems("mariadb", &format!("{backup}      donorPort: 4567\n")).is_empty());
        assert_eq!(
            problems(
                "mariadb",
                "    import:\n      source:\n        host: h\n      donorPort: 4567\n"
            ),
            ["spec.bootstrap.import.donorPort"]
        );
        assert_eq!(
            problems("mariadb", &format!("{backup}      databases: [shop]\n")),
            ["spec.bootstrap.import.databases"]
        );
        let spec: crate::ClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": 1,
            "mysql": {"flavor": "mariadb"},
            "bootstrap": {"import": {"source": {"host": "h"}, "method": "backup"}}
        }))
        .unwrap();
        assert_eq!(
            spec.import().unwrap().donor_port(),
            super::DEFAULT_DONOR_PORT
        );
    }
}
