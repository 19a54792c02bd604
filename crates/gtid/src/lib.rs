//! GTID histories of the two server flavours, and how they compare.
//!
//! * [`mysql::GtidSet`]: MySQL / Percona `uuid[:tag]:1-100:105` sets with exact
//!   set algebra (union, intersection, subtraction, subset).
//! * [`mariadb::GtidPos`] and [`mariadb::BinlogState`]: MariaDB
//!   `domain-server-seq` positions and binlog states. MariaDB cannot see holes,
//!   so containment is decided conservatively (see [`mariadb::BinlogState::contains_pos`]).
//!
//! Every parser returns an error for malformed input; nothing here panics on
//! user or server supplied text.

pub mod mariadb;
pub mod mysql;

use std::fmt;

/// A parse failure, naming what was wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GTID text {input:?}: {reason}")]
pub struct ParseError {
    pub input: String,
    pub reason: String,
}

impl ParseError {
    pub(crate) fn new(input: &str, reason: impl Into<String>) -> Self {
        let mut input = input.to_string();
        if input.len() > 200 {
            let mut cut = 200;
            while !input.is_char_boundary(cut) {
                cut -= 1;
            }
            input.truncate(cut);
            input.push('…');
        }
        ParseError {
            input,
            reason: reason.into(),
        }
    }
}

/// How one history relates to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Relation {
    /// Both hold the same transactions.
    Equal,
    /// `self` holds a strict subset of the other: it is behind and can catch up.
    Behind,
    /// `self` holds a strict superset of the other.
    Ahead,
    /// Each side holds something the other lacks (or, for MariaDB, we cannot
    /// prove otherwise). Never safe to replicate between them.
    Diverged,
}

impl Relation {
    /// `self` holds everything the other side holds.
    pub fn contains_other(self) -> bool {
        matches!(self, Relation::Equal | Relation::Ahead)
    }

    /// Combine the two one-way containment answers into a relation.
    pub fn from_containment(self_has_other: bool, other_has_self: bool) -> Relation {
        match (self_has_other, other_has_self) {
            (true, true) => Relation::Equal,
            (true, false) => Relation::Ahead,
            (false, true) => Relation::Behind,
            (false, false) => Relation::Diverged,
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Relation::Equal => "equal",
            Relation::Behind => "behind",
            Relation::Ahead => "ahead",
            Relation::Diverged => "diverged",
        })
    }
}

/// A selection of a binary log: what one history holds beyond another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beyond {
    /// Exactly these GTIDs (MySQL).
    Gtids(String),
    /// Every event after these GTIDs, one per domain (MariaDB).
    After(String),
}

impl fmt::Display for Beyond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Beyond::Gtids(s) => f.write_str(s),
            Beyond::After(s) => write!(f, "after {s}"),
        }
    }
}

/// The executed history of one instance, whatever the flavour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum History {
    Mysql(mysql::GtidSet),
    Mariadb(mariadb::BinlogState),
}

impl History {
    /// Relation of `self` to `other`. Histories of different flavours are
    /// never comparable and count as diverged.
    pub fn relation(&self, other: &History) -> Relation {
        match (self, other) {
            (History::Mysql(a), History::Mysql(b)) => a.relation(b),
            (History::Mariadb(a), History::Mariadb(b)) => a.relation(b),
            _ => Relation::Diverged,
        }
    }

    /// True when `self` holds every transaction of `other`.
    pub fn contains(&self, other: &History) -> bool {
        self.relation(other).contains_other()
    }

    /// The sources (MariaDB server ids, MySQL server UUIDs) of transactions
    /// in `self` that `other` lacks, or cannot be shown to hold.
    pub fn sources_missing_from(&self, other: &History) -> Vec<String> {
        match (self, other) {
            (History::Mysql(a), History::Mysql(b)) => {
                let mut v: Vec<String> = a.subtract(b).sids().map(|s| s.uuid.clone()).collect();
                v.dedup();
                v
            }
            (History::Mariadb(a), History::Mariadb(b)) => a
                .sources_missing_from(b)
                .into_iter()
                .map(|s| s.to_string())
                .collect(),
            _ => vec!["(another flavour)".to_string()],
        }
    }

    /// What `self` holds that `other` lacks, as a binary log reader selects
    /// it: MySQL the GTID set (`mysqlbinlog --include-gtids`), MariaDB the
    /// positions after which it begins (`mariadb-binlog --start-position`).
    /// `None` when there is nothing.
    pub fn beyond(&self, other: &History) -> Option<Beyond> {
        match (self, other) {
            (History::Mysql(a), History::Mysql(b)) => {
                let extra = a.subtract(b);
                (!extra.is_empty()).then(|| Beyond::Gtids(extra.to_string()))
            }
            (History::Mariadb(a), History::Mariadb(b)) => {
                let after = a.beyond(b);
                (!after.is_empty()).then(|| {
                    Beyond::After(
                        after
                            .iter()
                            .map(|g| g.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                })
            }
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            History::Mysql(s) => s.is_empty(),
            History::Mariadb(s) => s.is_empty(),
        }
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            History::Mysql(s) => fmt::Display::fmt(s, f),
            History::Mariadb(s) => fmt::Display::fmt(s, f),
        }
    }
}
