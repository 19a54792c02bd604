//! What a declared `Grant` may give, and on what: the one rule the
//! operator's validation and the instance manager's second check share.
//!
//! A Grant gives privileges of the database level on the application's
//! own databases. On `*` (every database, the server's own included) it
//! may give only a few global privileges that read nothing and change
//! nothing. The server's databases, and the operator's ledger, can never
//! be named, not even by a pattern that would match them.

use crate::field_error::FieldError;

/// The operator's ledger of what declarations made (`<ledger>.declared_objects`):
/// a database of the server that no declaration may name.
pub const LEDGER_DATABASE: &str = "cnmysql";

/// Databases no declaration may name: the server's own and the ledger.
pub const SYSTEM_DATABASES: &[&str] = &[
    "mysql",
    "sys",
    "information_schema",
    "performance_schema",
    LEDGER_DATABASE,
];

/// The privileges of a database (or table) level; `ALL PRIVILEGES` there
/// stands for these on both flavours (each may hold a few more).
pub const DATABASE_PRIVILEGES: &[&str] = &[
    "ALTER",
    "ALTER ROUTINE",
    "CREATE",
    "CREATE ROUTINE",
    "CREATE TEMPORARY TABLES",
    "CREATE VIEW",
    "DELETE",
    "DROP",
    "EVENT",
    "EXECUTE",
    "INDEX",
    "INSERT",
    "LOCK TABLES",
    "REFERENCES",
    "SELECT",
    "SHOW VIEW",
    "TRIGGER",
    "UPDATE",
];

/// The only privileges a Grant on `*` may give: global ones that neither
/// read rows nor change anything.
pub const GLOBAL_PRIVILEGES: &[&str] = &["PROCESS", "SHOW DATABASES", "REPLICATION CLIENT"];

/// `select` and ` Select ` name `SELECT`; `ALL` is `ALL PRIVILEGES`.
pub fn normalize_privilege(p: &str) -> String {
    let p = p
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase();
    if p == "ALL" {
        "ALL PRIVILEGES".into()
    } else {
        p
    }
}

/// Whether a Grant may name `p` (normalized) at all.
pub fn is_grantable(p: &str) -> bool {
    p == "ALL PRIVILEGES" || DATABASE_PRIVILEGES.contains(&p) || GLOBAL_PRIVILEGES.contains(&p)
}

/// The system database `name` is, or would match as a pattern of `GRANT`
/// (`_` any one character, `%` any run), whatever the letter case.
pub fn system_database(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    SYSTEM_DATABASES
        .iter()
        .copied()
        .find(|s| like(lower.as_bytes(), s.as_bytes()))
}

/// SQL's `LIKE` without escapes: `_` one byte, `%` any run.
fn like(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.split_first() {
        None => s.is_empty(),
        Some((b'%', rest)) => (0..=s.len()).any(|i| like(rest, &s[i..])),
        Some((b'_', rest)) => !s.is_empty() && like(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && like(rest, &s[1..]),
    }
}

/// A database name as a database-level `GRANT` must be given it to mean
/// exactly that database: `_` and `%` escaped (they are patterns there;
/// a table-level grant takes the name as it is).
pub fn grant_database_literal(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    for c in name.chars() {
        if matches!(c, '_' | '%' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn problem(field: String, message: String) -> FieldError {
    FieldError { field, message }
}

/// What is wrong with giving `privileges` on `database`.`table` (with the
/// grant option when `grant_option`): each problem names the field of a
/// Grant's spec. Empty when the Grant stays within the application's
/// databases.
pub fn grant_problems(
    database: &str,
    table: &str,
    privileges: &[String],
    grant_option: bool,
) -> Vec<FieldError> {
    let mut e = Vec::new();
    let every = database == "*";
    if let Some(s) = (!every).then(|| system_database(database)).flatten() {
        let how = if s.eq_ignore_ascii_case(database) {
            String::new()
        } else {
            format!(" (as a pattern, {database:?} matches it)")
        };
        e.push(problem(
            "spec.database".into(),
            format!("{s} is a database of the server's own{how}: grant on the application's databases only"),
        ));
    }
    for (i, p) in privileges.iter().enumerate() {
        let p = normalize_privilege(p);
        let field = format!("spec.privileges[{i}]");
        if !is_grantable(&p) {
            e.push(problem(
                field,
                format!(
                    "{p:?} is not a privilege a Grant may give; one of ALL PRIVILEGES, {}, or on database \"*\" {}",
                    DATABASE_PRIVILEGES.join(", "),
                    GLOBAL_PRIVILEGES.join(", ")
                ),
            ));
        } else if every && !GLOBAL_PRIVILEGES.contains(&p.as_str()) {
            e.push(problem(
                field,
                format!(
                    "{p} on database \"*\" would reach every database, the server's own included: name the application's database in spec.database (on \"*\" only {})",
                    GLOBAL_PRIVILEGES.join(", ")
                ),
            ));
        } else if !every && GLOBAL_PRIVILEGES.contains(&p.as_str()) {
            e.push(problem(
                field,
                format!("{p} is a global privilege: give it in a Grant on database \"*\""),
            ));
        }
    }
    if every && table != "*" {
        e.push(problem(
            "spec.table".into(),
            format!("{table:?}: a table needs a database; name one in spec.database"),
        ));
    }
    if every && grant_option {
        e.push(problem(
            "spec.grantOption".into(),
            "may not be given on database \"*\": the user could pass global privileges on".into(),
        ));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(database: &str, privileges: &[&str], grant_option: bool) -> Vec<String> {
        let p: Vec<String> = privileges.iter().map(|s| s.to_string()).collect();
        grant_problems(database, "*", &p, grant_option)
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn on_every_database_only_the_harmless_global_privileges() {
        assert!(fields("*", &["PROCESS", "show databases"], false).is_empty());
        for p in ["ALL PRIVILEGES", "ALL", "SELECT", "INSERT", "UPDATE"] {
            assert_eq!(fields("*", &[p], false), ["spec.privileges[0]"], "{p}");
        }
        assert_eq!(fields("*", &["PROCESS"], true), ["spec.grantOption"]);
        assert_eq!(fields("shop", &["PROCESS"], false), ["spec.privileges[0]"]);
        assert!(fields("shop", &["ALL", "SELECT"], true).is_empty());
        assert_eq!(
            fields("shop", &["SUPER", "FILE"], false),
            ["spec.privileges[0]", "spec.privileges[1]"]
        );
    }

    #[test]
    fn the_servers_databases_are_refused_by_name_and_by_pattern() {
        for d in [
            "mysql", "MySQL", "sys", "mysq_", "m%", "perf%", "cnmysql", "_ys",
        ] {
            assert_eq!(fields(d, &["SELECT"], false), ["spec.database"], "{d}");
        }
        for d in ["shop", "mysql2", "my_app", "sys_a"] {
            assert!(fields(d, &["SELECT"], false).is_empty(), "{d}");
        }
        let e = grant_problems("mysq_", "*", &["SELECT".into()], false);
        assert!(e[0].message.contains("matches it"), "{}", e[0].message);
    }

    #[test]
    fn a_database_level_grant_names_its_database_literally() {
        assert_eq!(grant_database_literal("my_app"), "my\\_app");
        assert_eq!(grant_database_literal("shop"), "shop");
        assert_eq!(grant_database_literal("a%b\\"), "a\\%b\\\\");
    }
}
