//! Declared grants: exactly the declared privileges at the Grant's level
//! (missing ones given, ones added by hand revoked), for users and on
//! databases that belong to the application: `app`, or made by a
//! declaration (or adopted). A database level names its database
//! literally (`_` escaped), never as a pattern.

use std::collections::BTreeSet;

use cnmysql_api::names::{APP_DATABASE, APP_USER};
use cnmysql_api::sql_privileges::{
    DATABASE_PRIVILEGES, grant_database_literal, normalize_privilege,
};

use super::accounts::{account, ident};
use super::{DeclaredGrant, Level, Made, Observed, Planned};
use crate::flavor::Sql;

/// `db`.`table` as a statement names it, and the level as the server's
/// tables record it.
fn level(g: &DeclaredGrant) -> (String, Level) {
    let (at, database) = match (g.database.as_str(), g.table.as_str()) {
        ("*", _) => ("*.*".to_string(), "*".to_string()),
        (db, "*") => {
            let literal = grant_database_literal(db);
            (format!("{}.*", ident(&literal)), literal)
        }
        (db, t) => (format!("{}.{}", ident(db), ident(t)), db.to_string()),
    };
    let key = (g.user.clone(), g.host.clone(), database, g.table.clone());
    (at, key)
}

/// Why a declaration may not touch this grant: its user or its database
/// is not the application's.
fn not_the_applications(g: &DeclaredGrant, o: &Observed) -> Option<String> {
    let user = Made::User {
        name: g.user.clone(),
        host: g.host.clone(),
    };
    if g.user != APP_USER && !o.made.contains(&user) {
        return Some(format!(
            "the account {} was not made by a declaration: a Grant gives privileges to declared users (and app) only; to hand an existing account over, list it in the Cluster's spec.managed.adopt.users and declare it with a User",
            account(&g.user, &g.host)
        ));
    }
    let db = Made::Database(g.database.clone());
    if g.database != "*" && g.database != APP_DATABASE && !o.made.contains(&db) {
        return Some(format!(
            "the database {} was not made by a declaration: a Grant gives privileges on declared databases (and app) only; declare it with a Database (an existing one also listed in the Cluster's spec.managed.adopt.databases)",
            g.database
        ));
    }
    None
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
            out.extend(DATABASE_PRIVILEGES.iter().map(|s| s.to_string()));
        } else {
            out.insert(p);
        }
    }
    (out, all)
}

pub(super) fn plan_grant(g: &DeclaredGrant, o: &Observed) -> Result<Vec<Sql>, String> {
    if !o.users.contains_key(&(g.user.clone(), g.host.clone())) {
        return Err(format!(
            "the user {} does not exist: declare it with a User",
            account(&g.user, &g.host)
        ));
    }
    if let Some(why) = not_the_applications(g, o) {
        return Err(why);
    }
    let who = account(&g.user, &g.host);
    let (at, key) = level(g);
    let (have, grantable) = o.privileges.get(&key).cloned().unwrap_or_default();
    let (want, all) = wanted_privileges(g);
    let mut out = Vec::new();
    let missing = want.iter().any(|p| !have.contains(p));
    if missing || (g.grant_option && !grantable) {
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
    let extra: Vec<&str> = have
        .iter()
        .filter(|p| !want.contains(*p) && !all && *p != "USAGE")
        .map(|s| s.as_str())
        .collect();
    if !extra.is_empty() {
        out.push(Sql::new(format!(
            "REVOKE {} ON {at} FROM {who}",
            extra.join(", ")
        )));
    }
    if grantable && !g.grant_option {
        out.push(Sql::new(format!("REVOKE GRANT OPTION ON {at} FROM {who}")));
    }
    Ok(out)
}

pub(super) fn remove_grant(g: &DeclaredGrant, o: &Observed) -> Planned {
    if let Some(why) = not_the_applications(g, o) {
        return Planned::kept(format!("its privileges were kept: {why}"));
    }
    let (at, key) = level(g);
    let who = account(&g.user, &g.host);
    match o.privileges.get(&key) {
        Some((have, grantable)) if !have.is_empty() || *grantable => {
            let mut v = vec![Sql::new(format!(
                "REVOKE ALL PRIVILEGES ON {at} FROM {who}"
            ))];
            if *grantable {
                v.push(Sql::new(format!("REVOKE GRANT OPTION ON {at} FROM {who}")));
            }
            Planned::run(v)
        }
        _ => Planned::default(),
    }
}
