//! Declared databases and users: created (and recorded in the ledger),
//! altered back to what is declared, dropped on deletion; an existing one
//! that no declaration made is refused unless the Cluster lists it for
//! adoption, and never dropped.

use cnmysql_api::sql_objects::{RequireSpec, UserLimits};

use super::{DeclaredDatabase, DeclaredUser, Made, Observed, ObservedUser, Planned, ledger};
use crate::flavor::{Sql, quote};

pub(super) fn ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

pub(super) fn account(user: &str, host: &str) -> String {
    format!("{}@{}", quote(user), quote(host))
}

/// Whether a declaration may act on `m`: one made it, or the Cluster
/// lists it for adoption (then the ledger records it first). Else why not.
fn claim(
    m: &Made,
    exists: bool,
    adopt: bool,
    o: &Observed,
    what: String,
) -> Result<Vec<Sql>, String> {
    if o.made.contains(m) {
        return Ok(Vec::new());
    }
    if !exists {
        return Ok(vec![ledger::record(m)]);
    }
    if adopt {
        return Ok(vec![ledger::record(m)]);
    }
    let field = match m {
        Made::Database(_) => "spec.managed.adopt.databases",
        Made::User { .. } => "spec.managed.adopt.users",
    };
    Err(format!(
        "{what} exists and no declaration made it: a declaration does not take over what it did not make; to hand it over, list it in the Cluster's {field}"
    ))
}

pub(super) fn plan_database(db: &DeclaredDatabase, o: &Observed) -> Result<Planned, String> {
    let m = Made::Database(db.name.clone());
    let have = o.databases.get(&db.name);
    let record = claim(
        &m,
        have.is_some(),
        db.adopt,
        o,
        format!("the database {}", db.name),
    )?;
    let charset = db.character_set.as_deref().unwrap_or("utf8mb4");
    let mut spec = format!(" CHARACTER SET {}", ident(charset));
    if let Some(c) = &db.collation {
        spec.push_str(&format!(" COLLATE {}", ident(c)));
    }
    let change = match have {
        None => Some(format!("CREATE DATABASE {}{spec}", ident(&db.name))),
        Some((cs, coll)) => {
            let differs = !cs.eq_ignore_ascii_case(charset)
                || db
                    .collation
                    .as_deref()
                    .is_some_and(|c| !c.eq_ignore_ascii_case(coll));
            differs.then(|| format!("ALTER DATABASE {}{spec}", ident(&db.name)))
        }
    };
    Ok(with_record(
        record,
        change.map(Sql::new),
        &m,
        have.is_none(),
    ))
}

/// The ledger entry (if new) before the change; a creation that fails
/// takes the entry back.
fn with_record(record: Vec<Sql>, change: Option<Sql>, m: &Made, creates: bool) -> Planned {
    let undo = if creates && !record.is_empty() {
        vec![ledger::forget(m)]
    } else {
        Vec::new()
    };
    Planned {
        run: record.into_iter().chain(change).collect(),
        undo,
        note: None,
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

pub(super) fn plan_user(u: &DeclaredUser, o: &Observed) -> Result<Planned, String> {
    let m = Made::User {
        name: u.name.clone(),
        host: u.host.clone(),
    };
    let who = account(&u.name, &u.host);
    let have = o.users.get(&(u.name.clone(), u.host.clone()));
    let record = claim(&m, have.is_some(), u.adopt, o, format!("the account {who}"))?;
    let (require, want) = require_clause(&u.require);
    let limits = limits_of(&u.limits);
    let tail = format!("{require} {}", limits_clause(&limits));
    let password = |verb: &str| {
        let by = |pw: &str| format!("{verb} {who} IDENTIFIED BY {pw} {tail}");
        Sql::secret(by(&quote(&u.password)), by("'<redacted>'"))
    };
    let change = match have {
        None => Some(password("CREATE USER")),
        // Adopted: its password is the declared one from now on.
        Some(_) if u.set_password || !record.is_empty() => Some(password("ALTER USER")),
        Some(have) => {
            let same = have.ssl_type.eq_ignore_ascii_case(&want.ssl_type)
                && have.issuer == want.issuer
                && have.subject == want.subject
                && have.limits == limits;
            (!same).then(|| Sql::new(format!("ALTER USER {who} {tail}")))
        }
    };
    Ok(with_record(record, change, &m, have.is_none()))
}

fn kept(what: String) -> Planned {
    Planned::kept(format!(
        "{what} was kept: no declaration made it, so none drops it"
    ))
}

pub(super) fn remove_database(name: &str, o: &Observed) -> Planned {
    let m = Made::Database(name.to_string());
    let exists = o.databases.contains_key(name);
    match (exists, o.made.contains(&m)) {
        (true, false) => kept(format!("the database {name}")),
        (true, true) => Planned::run(vec![
            Sql::new(format!("DROP DATABASE IF EXISTS {}", ident(name))),
            ledger::forget(&m),
        ]),
        (false, true) => Planned::run(vec![ledger::forget(&m)]),
        (false, false) => Planned::default(),
    }
}

pub(super) fn remove_user(name: &str, host: &str, o: &Observed) -> Planned {
    let m = Made::User {
        name: name.to_string(),
        host: host.to_string(),
    };
    let exists = o.users.contains_key(&(name.to_string(), host.to_string()));
    match (exists, o.made.contains(&m)) {
        (true, false) => kept(format!("the account {}", account(name, host))),
        (true, true) => Planned::run(vec![
            Sql::new(format!("DROP USER IF EXISTS {}", account(name, host))),
            ledger::forget(&m),
        ]),
        (false, true) => Planned::run(vec![ledger::forget(&m)]),
        (false, false) => Planned::default(),
    }
}
