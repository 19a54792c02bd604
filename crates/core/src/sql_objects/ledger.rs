//! The ledger of what declarations made: a table in the server
//! (`cnmysql.declared_objects`), written by the primary's manager in the
//! same pass that creates a database or an account, and read at the start
//! of every pass. Being in the server, it replicates with what it records
//! and survives failovers, restores and clones. No declaration may name its
//! database, so no declared account can write it.

use std::collections::BTreeSet;

use cnmysql_api::sql_privileges::LEDGER_DATABASE;

use super::Made;
use crate::flavor::{Sql, quote};

/// The ledger table, quoted.
pub fn table() -> String {
    format!("`{LEDGER_DATABASE}`.`declared_objects`")
}

/// Make the ledger if it is not there (binary-logged: the replicas get it).
pub fn setup() -> Vec<Sql> {
    vec![
        Sql::new(format!(
            "CREATE DATABASE IF NOT EXISTS `{LEDGER_DATABASE}` CHARACTER SET utf8mb4"
        )),
        Sql::new(format!(
            "CREATE TABLE IF NOT EXISTS {} (kind VARCHAR(16) NOT NULL, name VARCHAR(80) NOT NULL, \
             host VARCHAR(255) NOT NULL DEFAULT '', PRIMARY KEY (kind, name, host)) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            table()
        )),
    ]
}

/// The query reading the ledger: rows of (kind, name, host).
pub fn read_query() -> String {
    format!("SELECT kind, name, host FROM {}", table())
}

/// The ledger's rows as what they record (rows of unknown kinds ignored).
pub fn made_of(rows: Vec<(String, String, String)>) -> BTreeSet<Made> {
    rows.into_iter()
        .filter_map(|(kind, name, host)| match kind.as_str() {
            "database" => Some(Made::Database(name)),
            "user" => Some(Made::User { name, host }),
            _ => None,
        })
        .collect()
}

fn row(m: &Made) -> (&'static str, &str, &str) {
    match m {
        Made::Database(name) => ("database", name, ""),
        Made::User { name, host } => ("user", name, host),
    }
}

/// Record that a declaration made `m`.
pub fn record(m: &Made) -> Sql {
    let (kind, name, host) = row(m);
    Sql::new(format!(
        "INSERT IGNORE INTO {} (kind, name, host) VALUES ({}, {}, {})",
        table(),
        quote(kind),
        quote(name),
        quote(host)
    ))
}

/// Forget `m` (dropped, or its creation failed).
pub fn forget(m: &Made) -> Sql {
    let (kind, name, host) = row(m);
    Sql::new(format!(
        "DELETE FROM {} WHERE kind = {} AND name = {} AND host = {}",
        table(),
        quote(kind),
        quote(name),
        quote(host)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_reads_back_what_it_records() {
        let rows = vec![
            ("database".to_string(), "shop".to_string(), String::new()),
            ("user".into(), "shopper".into(), "%".into()),
            ("role".into(), "later".into(), String::new()),
        ];
        let made = made_of(rows);
        assert!(made.contains(&Made::Database("shop".into())));
        assert!(made.contains(&Made::User {
            name: "shopper".into(),
            host: "%".into()
        }));
        assert_eq!(made.len(), 2);
        assert_eq!(
            record(&Made::User {
                name: "o'k".into(),
                host: "%".into()
            })
            .text,
            "INSERT IGNORE INTO `cnmysql`.`declared_objects` (kind, name, host) VALUES ('user', 'o''k', '%')"
        );
    }
}
