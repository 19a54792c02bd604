//! Declared databases, users and grants against what the primary holds:
//! the statements that make it hold them (`Database`, `User`, `Grant`
//! resources, `cnmysql_api::sql_objects`). A pure function of the two, so
//! both platforms and every retry decide alike; only what a resource
//! declares is ever created, altered, revoked or dropped.

use std::collections::{BTreeMap, BTreeSet};

use cnmysql_api::sql_objects::{
    DeletionPolicy, GrantSpec, RequireSpec, SqlObjectDoc, UserLimits, normalize_privilege,
};

use serde::{Deserialize, Serialize};

use crate::flavor::{Sql, quote};

/// A database as declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredDatabase {
    pub name: String,
    pub character_set: Option<String>,
    pub collation: Option<String>,
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
}

impl Declared {
    /// What `doc` declares. A User's `password` is its Secret's value, and
    /// `set_password` whether it differs from the one last set.
    pub fn of(doc: &SqlObjectDoc, password: &str, set_password: bool) -> Declared {
        match doc {
            SqlObjectDoc::Database(d) => Declared::Database(DeclaredDatabase {
                name: d.spec.name_in_server(&doc.name()).to_string(),
                character_set: d.spec.character_set.clone(),
                collation: d.spec.collation.clone(),
            }),
            SqlObjectDoc::User(u) => Declared::User(DeclaredUser {
                name: u.spec.name_in_server(&doc.name()).to_string(),
                host: u.spec.host.clone(),
                password: password.to_string(),
                set_password,
                require: u.spec.require.clone().unwrap_or_default(),
                limits: u.spec.limits.clone().unwrap_or_default(),
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

/// A grant's level: (user, host, database, table), `*` for every one.
pub type Level = (String, String, String, String);

/// What the primary holds, read at the start of a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Name → (character set, collation).
    pub databases: BTreeMap<String, (String, String)>,
    /// (user, host) → its settings.
    pub users: BTreeMap<(String, String), ObservedUser>,
    /// (user, host, database, table) → privileges, and whether grantable.
    pub privileges: BTreeMap<Level, (BTreeSet<String>, bool)>,
}

/// What `ALL PRIVILEGES` stands for at a database or table level.
const ALL_AT_DATABASE: &[&str] = cnmysql_api::sql_objects::DATABASE_PRIVILEGES;

fn ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

fn account(user: &str, host: &str) -> String {
    format!("{}@{}", quote(user), quote(host))
}

fn level(database: &str, table: &str) -> String {
    let d = if database == "*" {
        "*".into()
    } else {
        ident(database)
    };
    let t = if table == "*" {
        "*".into()
    } else {
        ident(table)
    };
    format!("{d}.{t}")
}

/// The statements for one declared object, given what the server holds;
/// empty when it already holds it. An error says what it waits for (a
/// grant's user that does not exist).
pub fn plan(d: &Declared, o: &Observed) -> Result<Vec<Sql>, String> {
    Ok(match d {
        Declared::Database(db) => plan_database(db, o),
        Declared::User(u) => plan_user(u, o),
        Declared::Grant(g) => {
            if !o.users.contains_key(&(g.user.clone(), g.host.clone())) {
                return Err(format!(
                    "the user {} does not exist: declare it with a User",
                    account(&g.user, &g.host)
                ));
            }
            plan_grant(g, o)
        }
        Declared::Removal(r) => plan_removal(r, o),
    })
}

fn plan_database(db: &DeclaredDatabase, o: &Observed) -> Vec<Sql> {
    let charset = db.character_set.as_deref().unwrap_or("utf8mb4");
    let mut spec = format!(" CHARACTER SET {}", ident(charset));
    if let Some(c) = &db.collation {
        spec.push_str(&format!(" COLLATE {}", ident(c)));
    }
    match o.databases.get(&db.name) {
        None => vec![Sql::new(format!(
            "CREATE DATABASE IF NOT EXISTS {}{spec}",
            ident(&db.name)
        ))],
        Some((cs, coll)) => {
            let differs = !cs.eq_ignore_ascii_case(charset)
                || db
                    .collation
                    .as_deref()
                    .is_some_and(|c| !c.eq_ignore_ascii_case(coll));
            if differs {
                vec![Sql::new(format!(
                    "ALTER DATABASE {}{spec}",
                    ident(&db.name)
                ))]
            } else {
                Vec::new()
            }
        }
    }
}

/// `REQUIRE …` as declared, and as `mysql.user` records it.
fn require_clause(r: &RequireSpec) -> (String, ObservedUser) {
    let mut o = ObservedUser::default();
    let mut parts = Vec::new();
    if let Some(i) = &r.issuer {
        parts.push(format!("ISSUER {}", quote(i)));
        o.issuer = i.clone();
    }
    if let Some(s) = &r.subject {
        parts.push(format!("SUBJECT {}", quote(s)));
        o.subject = s.clone();
    }
    let clause = if !parts.is_empty() {
        o.ssl_type = "SPECIFIED".into();
        parts.join(" AND ")
    } else if r.x509 {
        o.ssl_type = "X509".into();
        "X509".into()
    } else if r.ssl {
        o.ssl_type = "ANY".into();
        "SSL".into()
    } else {
        "NONE".into()
    };
    (format!("REQUIRE {clause}"), o)
}

fn limits_of(l: &UserLimits) -> [u32; 4] {
    [
        l.max_queries_per_hour.unwrap_or(0),
        l.max_updates_per_hour.unwrap_or(0),
        l.max_connections_per_hour.unwrap_or(0),
        l.max_user_connections.unwrap_or(0),
    ]
}

fn limits_clause(l: &[u32; 4]) -> String {
    format!(
        "WITH MAX_QUERIES_PER_HOUR {} MAX_UPDATES_PER_HOUR {} MAX_CONNECTIONS_PER_HOUR {} MAX_USER_CONNECTIONS {}",
        l[0], l[1], l[2], l[3]
    )
}

fn plan_user(u: &DeclaredUser, o: &Observed) -> Vec<Sql> {
    let who = account(&u.name, &u.host);
    let (require, want) = require_clause(&u.require);
    let limits = limits_of(&u.limits);
    let tail = format!("{require} {}", limits_clause(&limits));
    let password = |verb: &str| {
        let by = |pw: &str| format!("{verb} {who} IDENTIFIED BY {pw} {tail}");
        Sql::secret(by(&quote(&u.password)), by("'<redacted>'"))
    };
    let Some(have) = o.users.get(&(u.name.clone(), u.host.clone())) else {
        return vec![password("CREATE USER IF NOT EXISTS")];
    };
    if u.set_password {
        return vec![password("ALTER USER")];
    }
    let same = have.ssl_type.eq_ignore_ascii_case(&want.ssl_type)
        && have.issuer == want.issuer
        && have.subject == want.subject
        && have.limits == limits;
    if same {
        Vec::new()
    } else {
        vec![Sql::new(format!("ALTER USER {who} {tail}"))]
    }
}

/// The declared privileges as the server names them, `ALL PRIVILEGES`
/// expanded, and whether every one is held.
fn wanted_privileges(g: &DeclaredGrant) -> (BTreeSet<String>, bool) {
    let mut all = false;
    let mut out = BTreeSet::new();
    for p in &g.privileges {
        let p = normalize_privilege(p);
        if p == "ALL PRIVILEGES" {
            all = true;
            out.extend(ALL_AT_DATABASE.iter().map(|s| s.to_string()));
        } else {
            out.insert(p);
        }
    }
    (out, all)
}

fn plan_grant(g: &DeclaredGrant, o: &Observed) -> Vec<Sql> {
    let who = account(&g.user, &g.host);
    let at = level(&g.database, &g.table);
    let key = (
        g.user.clone(),
        g.host.clone(),
        g.database.clone(),
        g.table.clone(),
    );
    let (have, grantable) = o.privileges.get(&key).cloned().unwrap_or_default();
    let (want, all) = wanted_privileges(g);
    let mut out = Vec::new();
    let missing: Vec<&String> = want.iter().filter(|p| !have.contains(*p)).collect();
    if !missing.is_empty() || (g.grant_option && !grantable) {
        let what = if all {
            "ALL PRIVILEGES".to_string()
        } else {
            want.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        let option = if g.grant_option {
            " WITH GRANT OPTION"
        } else {
            ""
        };
        out.push(Sql::new(format!("GRANT {what} ON {at} TO {who}{option}")));
    }
    // Granted by hand beside the declared ones (ALL keeps whatever a
    // flavour adds to it).
    let extra: Vec<&String> = have
        .iter()
        .filter(|p| !want.contains(*p) && !all && *p != "USAGE")
        .collect();
    if !extra.is_empty() {
        let list = extra
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Sql::new(format!("REVOKE {list} ON {at} FROM {who}")));
    }
    if grantable && !g.grant_option {
        out.push(Sql::new(format!("REVOKE GRANT OPTION ON {at} FROM {who}")));
    }
    out
}

fn plan_removal(r: &Removal, o: &Observed) -> Vec<Sql> {
    match r {
        Removal::Database(name) => {
            if o.databases.contains_key(name) {
                vec![Sql::new(format!("DROP DATABASE IF EXISTS {}", ident(name)))]
            } else {
                Vec::new()
            }
        }
        Removal::User { name, host } => {
            if o.users.contains_key(&(name.clone(), host.clone())) {
                vec![Sql::new(format!(
                    "DROP USER IF EXISTS {}",
                    account(name, host)
                ))]
            } else {
                Vec::new()
            }
        }
        Removal::Grant(g) => {
            let key = (
                g.user.clone(),
                g.host.clone(),
                g.database.clone(),
                g.table.clone(),
            );
            match o.privileges.get(&key) {
                Some((have, grantable)) if !have.is_empty() || *grantable => {
                    let at = level(&g.database, &g.table);
                    let who = account(&g.user, &g.host);
                    let mut v = vec![Sql::new(format!(
                        "REVOKE ALL PRIVILEGES ON {at} FROM {who}"
                    ))];
                    if *grantable {
                        v.push(Sql::new(format!("REVOKE GRANT OPTION ON {at} FROM {who}")));
                    }
                    v
                }
                _ => Vec::new(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(v: Result<Vec<Sql>, String>) -> Vec<String> {
        v.unwrap().into_iter().map(|s| s.text).collect()
    }

    fn user(set_password: bool) -> DeclaredUser {
        DeclaredUser {
            name: "shopper".into(),
            host: "%".into(),
            password: "s3cr'et".into(),
            set_password,
            require: RequireSpec {
                ssl: true,
                ..Default::default()
            },
            limits: UserLimits {
                max_user_connections: Some(20),
                ..Default::default()
            },
        }
    }

    fn grant(privileges: &[&str]) -> DeclaredGrant {
        DeclaredGrant {
            user: "shopper".into(),
            host: "%".into(),
            database: "shop".into(),
            table: "*".into(),
            privileges: privileges.iter().map(|s| s.to_string()).collect(),
            grant_option: false,
        }
    }

    fn with_user() -> Observed {
        let mut o = Observed::default();
        o.users.insert(
            ("shopper".into(), "%".into()),
            ObservedUser {
                ssl_type: "ANY".into(),
                limits: [0, 0, 0, 20],
                ..Default::default()
            },
        );
        o
    }

    #[test]
    fn a_missing_database_is_created_and_one_held_as_declared_is_left() {
        let d = Declared::Database(DeclaredDatabase {
            name: "shop".into(),
            character_set: None,
            collation: None,
        });
        let mut o = Observed::default();
        assert_eq!(
            texts(plan(&d, &o)),
            ["CREATE DATABASE IF NOT EXISTS `shop` CHARACTER SET `utf8mb4`"]
        );
        o.databases.insert(
            "shop".into(),
            ("utf8mb4".into(), "utf8mb4_0900_ai_ci".into()),
        );
        assert!(plan(&d, &o).unwrap().is_empty());
        o.databases
            .insert("shop".into(), ("latin1".into(), "latin1_swedish_ci".into()));
        assert_eq!(
            texts(plan(&d, &o)),
            ["ALTER DATABASE `shop` CHARACTER SET `utf8mb4`"]
        );
    }

    #[test]
    fn a_user_is_created_with_its_password_altered_when_it_changes_and_never_logged() {
        let o = Observed::default();
        let s = plan(&Declared::User(user(false)), &o).unwrap();
        assert_eq!(s.len(), 1);
        assert!(
            s[0].text.starts_with(
                "CREATE USER IF NOT EXISTS 'shopper'@'%' IDENTIFIED BY 's3cr''et' REQUIRE SSL WITH"
            ),
            "{}",
            s[0].text
        );
        assert!(
            !s[0].to_string().contains("s3cr"),
            "the password is never shown"
        );
        assert!(!format!("{:?}", user(true)).contains("s3cr"));
        let o = with_user();
        assert!(
            plan(&Declared::User(user(false)), &o).unwrap().is_empty(),
            "held as declared"
        );
        let s = texts(plan(&Declared::User(user(true)), &o));
        assert!(
            s[0].starts_with("ALTER USER 'shopper'@'%' IDENTIFIED BY"),
            "{s:?}"
        );
        // Changed by hand: put back, the password untouched.
        let mut drifted = with_user();
        drifted
            .users
            .get_mut(&("shopper".into(), "%".into()))
            .unwrap()
            .ssl_type = String::new();
        let s = texts(plan(&Declared::User(user(false)), &drifted));
        assert_eq!(
            s,
            [
                "ALTER USER 'shopper'@'%' REQUIRE SSL WITH MAX_QUERIES_PER_HOUR 0 MAX_UPDATES_PER_HOUR 0 MAX_CONNECTIONS_PER_HOUR 0 MAX_USER_CONNECTIONS 20"
            ]
        );
    }

    #[test]
    fn a_grant_gives_what_is_missing_and_revokes_what_was_added_by_hand() {
        let g = Declared::Grant(grant(&["select", "INSERT"]));
        let waits = plan(&g, &Observed::default()).unwrap_err();
        assert!(waits.contains("'shopper'@'%' does not exist"), "{waits}");
        let mut o = with_user();
        assert_eq!(
            texts(plan(&g, &o)),
            ["GRANT INSERT, SELECT ON `shop`.* TO 'shopper'@'%'"]
        );
        let key = (
            "shopper".to_string(),
            "%".to_string(),
            "shop".to_string(),
            "*".to_string(),
        );
        o.privileges.insert(
            key.clone(),
            (["SELECT", "INSERT"].map(String::from).into(), false),
        );
        assert!(plan(&g, &o).unwrap().is_empty());
        o.privileges.insert(
            key.clone(),
            (["SELECT", "DELETE"].map(String::from).into(), true),
        );
        assert_eq!(
            texts(plan(&g, &o)),
            [
                "GRANT INSERT, SELECT ON `shop`.* TO 'shopper'@'%'",
                "REVOKE DELETE ON `shop`.* FROM 'shopper'@'%'",
                "REVOKE GRANT OPTION ON `shop`.* FROM 'shopper'@'%'"
            ]
        );
        // ALL PRIVILEGES: held once every one of the level is.
        let all = Declared::Grant(grant(&["ALL"]));
        o.privileges.insert(
            key,
            (
                ALL_AT_DATABASE
                    .iter()
                    .map(|s| s.to_string())
                    .chain(["DELETE HISTORY".into()])
                    .collect(),
                false,
            ),
        );
        assert!(plan(&all, &o).unwrap().is_empty());
    }

    #[test]
    fn a_password_digest_changes_with_the_password_and_the_key_and_shows_neither() {
        let d = password_digest("k", "shopper", "%", "pw1");
        assert_eq!(d.len(), 32);
        assert_eq!(d, password_digest("k", "shopper", "%", "pw1"));
        assert_ne!(d, password_digest("k", "shopper", "%", "pw2"));
        assert_ne!(d, password_digest("other", "shopper", "%", "pw1"));
        assert!(!d.contains("pw1"));
    }

    #[test]
    fn a_removal_drops_or_revokes_only_what_is_there() {
        let mut o = with_user();
        o.databases
            .insert("shop".into(), ("utf8mb4".into(), "x".into()));
        let r = |r| texts(plan(&Declared::Removal(r), &o));
        assert_eq!(
            r(Removal::Database("shop".into())),
            ["DROP DATABASE IF EXISTS `shop`"]
        );
        assert!(r(Removal::Database("gone".into())).is_empty());
        assert_eq!(
            r(Removal::User {
                name: "shopper".into(),
                host: "%".into()
            }),
            ["DROP USER IF EXISTS 'shopper'@'%'"]
        );
        assert!(r(Removal::Grant(grant(&["SELECT"]))).is_empty());
    }
}
