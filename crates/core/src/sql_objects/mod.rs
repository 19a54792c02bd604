//! Declared databases, users and grants against what the primary holds:
//! the statements that make it hold them (`Database`, `User`, `Grant`
//! resources, `cnmysql_api::sql_objects`). A pure function of the two, so
//! both platforms and every retry decide alike.
//!
//! What a declaration may touch is bounded here, where the instance
//! manager plans, whatever the caller checked before (a second wall):
//! - a Grant gives database-level privileges on the application's
//!   databases (`app` and those a declaration made), and on `*` only the
//!   harmless global ones (`cnmysql_api::sql_privileges`);
//! - an account or a database that exists and that no declaration made is
//!   never taken over (its password set, its privileges changed, dropped)
//!   unless the Cluster lists it for adoption (`spec.managed.adopt`); what
//!   declarations made is recorded in the server itself ([`ledger`]), so it
//!   travels with replication, failovers and backups.

mod accounts;
mod grants;
pub mod ledger;

use std::collections::{BTreeMap, BTreeSet};

use cnmysql_api::sql_objects::{
    DeletionPolicy, GrantSpec, RequireSpec, SqlObjectDoc, UserLimits, database_name_problems,
    user_name_problems,
};
use cnmysql_api::sql_privileges::{grant_problems, normalize_privilege};
use serde::{Deserialize, Serialize};

use crate::flavor::Sql;

/// A database as declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredDatabase {
    pub name: String,
    pub character_set: Option<String>,
    pub collation: Option<String>,
    /// The Cluster lists it for adoption: an existing one no declaration
    /// made may be taken over.
    #[serde(default)]
    pub adopt: bool,
}

/// A user as declared, with its password when it must be set.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredUser {
    pub name: String,
    pub host: String,
    pub password: String,
    /// The password differs from the one last set (or never was).
    pub set_password: bool,
    pub require: RequireSpec,
    pub limits: UserLimits,
    /// The Cluster lists the account for adoption.
    #[serde(default)]
    pub adopt: bool,
}

impl std::fmt::Debug for DeclaredUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredUser")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("password", &"<redacted>")
            .field("set_password", &self.set_password)
            .field("require", &self.require)
            .field("limits", &self.limits)
            .field("adopt", &self.adopt)
            .finish()
    }
}

/// Privileges of a user at one level (`db`.`table`, `*` for every one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredGrant {
    pub user: String,
    pub host: String,
    pub database: String,
    pub table: String,
    pub privileges: BTreeSet<String>,
    pub grant_option: bool,
}

/// What a deleted resource with `deletionPolicy: Delete` takes away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Removal {
    Database(String),
    User { name: String, host: String },
    Grant(DeclaredGrant),
}

/// One object to reconcile: a key the platform knows it by, and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Declared {
    Database(DeclaredDatabase),
    User(DeclaredUser),
    Grant(DeclaredGrant),
    Removal(Removal),
}

impl Declared {
    /// Databases and users before grants, removals last (grants before
    /// the users and databases they name).
    pub fn order(&self) -> u8 {
        match self {
            Declared::Database(_) => 0,
            Declared::User(_) => 1,
            Declared::Grant(_) => 2,
            Declared::Removal(Removal::Grant(_)) => 3,
            Declared::Removal(Removal::User { .. }) => 4,
            Declared::Removal(Removal::Database(_)) => 5,
        }
    }

    /// What `doc` declares. A User's `password` is its Secret's value, and
    /// `set_password` whether it differs from the one last set; `adopt`
    /// whether the Cluster lists the object for adoption.
    pub fn of(doc: &SqlObjectDoc, password: &str, set_password: bool, adopt: bool) -> Declared {
        match doc {
            SqlObjectDoc::Database(d) => Declared::Database(DeclaredDatabase {
                name: d.spec.name_in_server(&doc.name()).to_string(),
                character_set: d.spec.character_set.clone(),
                collation: d.spec.collation.clone(),
                adopt,
            }),
            SqlObjectDoc::User(u) => Declared::User(DeclaredUser {
                name: u.spec.name_in_server(&doc.name()).to_string(),
                host: u.spec.host.clone(),
                password: password.to_string(),
                set_password,
                require: u.spec.require.clone().unwrap_or_default(),
                limits: u.spec.limits.clone().unwrap_or_default(),
                adopt,
            }),
            SqlObjectDoc::Grant(g) => Declared::Grant(grant_of(&g.spec)),
        }
    }

    /// What deleting `doc` takes away: None under `deletionPolicy: Keep`.
    pub fn removal_of(doc: &SqlObjectDoc) -> Option<Declared> {
        if doc.deletion_policy() == DeletionPolicy::Keep {
            return None;
        }
        let r = match doc {
            SqlObjectDoc::Database(d) => {
                Removal::Database(d.spec.name_in_server(&doc.name()).to_string())
            }
            SqlObjectDoc::User(u) => Removal::User {
                name: u.spec.name_in_server(&doc.name()).to_string(),
                host: u.spec.host.clone(),
            },
            SqlObjectDoc::Grant(g) => Removal::Grant(grant_of(&g.spec)),
        };
        Some(Declared::Removal(r))
    }
}

fn grant_of(g: &GrantSpec) -> DeclaredGrant {
    DeclaredGrant {
        user: g.username.clone(),
        host: g.host.clone(),
        database: g.database.clone(),
        table: g.table.clone(),
        privileges: g
            .privileges
            .iter()
            .map(|p| normalize_privilege(p))
            .collect(),
        grant_option: g.grant_option,
    }
}

/// Whether declared objects wait: while the cluster is hibernated (no
/// server runs) or its reconciliation is paused (`pause::ANNOTATION`),
/// nothing is planned or run; both platforms ask here.
pub fn on_hold(
    status: &cnmysql_api::ClusterStatus,
    cluster_annotations: &BTreeMap<String, String>,
) -> bool {
    status.hibernated || crate::pause::paused(cluster_annotations)
}

/// A User's password as last set, for telling a changed Secret apart: an
/// HMAC under `key` (a secret of the cluster's, so the digest in a status
/// cannot be tried against guesses), never the password.
pub fn password_digest(key: &str, user: &str, host: &str, password: &str) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("any key length");
    mac.update(format!("{user}@{host}\0{password}").as_bytes());
    let out = mac.finalize().into_bytes();
    out.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A user as the server holds it (`mysql.user`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedUser {
    /// `''`, `ANY`, `X509` or `SPECIFIED`.
    pub ssl_type: String,
    pub issuer: String,
    pub subject: String,
    pub limits: [u32; 4],
}

/// A grant's level: (user, host, database, table), `*` for every one; a
/// database level's name as the server records it (`_` escaped).
pub type Level = (String, String, String, String);

/// Something a declaration made, as the ledger records it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Made {
    Database(String),
    User { name: String, host: String },
}

/// What the primary holds, read at the start of a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Name → (character set, collation).
    pub databases: BTreeMap<String, (String, String)>,
    /// (user, host) → its settings.
    pub users: BTreeMap<(String, String), ObservedUser>,
    /// (user, host, database, table) → privileges, and whether grantable.
    pub privileges: BTreeMap<Level, (BTreeSet<String>, bool)>,
    /// What declarations made ([`ledger`]).
    pub made: BTreeSet<Made>,
    /// The ledger is not there yet (made before the first change).
    pub ledger_missing: bool,
}

/// The statements for one object: `run` in order; `undo` if one of them
/// fails (a ledger entry written before the object it records); `note`
/// what a pass that runs nothing has to say (something kept).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Planned {
    pub run: Vec<Sql>,
    pub undo: Vec<Sql>,
    pub note: Option<String>,
}

impl Planned {
    fn run(run: Vec<Sql>) -> Planned {
        Planned {
            run,
            ..Default::default()
        }
    }

    fn kept(note: String) -> Planned {
        Planned {
            note: Some(note),
            ..Default::default()
        }
    }
}

/// Why a declaration may not be carried out at all, whoever sent it: the
/// instance manager's own check of what the operator validated.
pub fn refusal(d: &Declared) -> Option<String> {
    let problems = match d {
        Declared::Database(db) => database_name_problems(&db.name, "spec.name"),
        Declared::Removal(Removal::Database(name)) => database_name_problems(name, "spec.name"),
        Declared::User(u) => user_name_problems(&u.name, "spec.name"),
        Declared::Removal(Removal::User { name, .. }) => user_name_problems(name, "spec.name"),
        Declared::Grant(g) | Declared::Removal(Removal::Grant(g)) => grant_refusal(g),
    };
    (!problems.is_empty()).then(|| {
        let each: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
        format!("refused by the instance manager: {}", each.join("; "))
    })
}

fn grant_refusal(g: &DeclaredGrant) -> Vec<cnmysql_api::FieldError> {
    let mut e = Vec::new();
    if g.user != cnmysql_api::names::APP_USER {
        e.extend(user_name_problems(&g.user, "spec.username"));
    }
    if g.database != "*" {
        e.extend(database_name_problems(&g.database, "spec.database"));
    }
    let privileges: Vec<String> = g.privileges.iter().cloned().collect();
    e.extend(grant_problems(
        &g.database,
        &g.table,
        &privileges,
        g.grant_option,
    ));
    e
}

/// The statements for one declared object, given what the server holds;
/// nothing to run when it already holds it. An error says what it waits
/// for (a grant's user that does not exist) or why it is refused.
pub fn plan(d: &Declared, o: &Observed) -> Result<Planned, String> {
    if let Some(why) = refusal(d) {
        return Err(why);
    }
    match d {
        Declared::Database(db) => accounts::plan_database(db, o),
        Declared::User(u) => accounts::plan_user(u, o),
        Declared::Grant(g) => grants::plan_grant(g, o).map(Planned::run),
        Declared::Removal(Removal::Database(name)) => Ok(accounts::remove_database(name, o)),
        Declared::Removal(Removal::User { name, host }) => Ok(accounts::remove_user(name, host, o)),
        Declared::Removal(Removal::Grant(g)) => Ok(grants::remove_grant(g, o)),
    }
}

#[cfg(test)]
mod tests;
