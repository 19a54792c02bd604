//! MariaDB GTIDs: `domain-server-seq`.
//!
//! * A [`GtidPos`] (`@@gtid_binlog_pos`, `@@gtid_slave_pos`,
//!   `@@gtid_current_pos`, the backup's `xtrabackup_binlog_info`) holds the
//!   last GTID of each replication domain.
//! * A [`BinlogState`] (`@@gtid_binlog_state`) holds the last sequence number
//!   written by each (domain, server) pair.
//!
//! MariaDB does not record holes, so containment can only be argued from
//! these summaries. We decide conservatively (DESIGN §3): a GTID `d-s-n` is
//! contained in a state only when that state knows domain `d` with a
//! sequence number at least `n` **and** has an entry for server `s` in domain
//! `d` at or beyond `n`. An unknown domain means "not contained". Anything we
//! cannot prove counts as divergence.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::{ParseError, Relation};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl FromStr for Gtid {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let t = input.trim();
        let parts: Vec<&str> = t.split('-').collect();
        if parts.len() != 3 {
            return Err(ParseError::new(
                input,
                "a MariaDB GTID is domain-server-seq",
            ));
        }
        let num = |p: &str, what: &str| -> Result<u64, ParseError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseError::new(
                    input,
                    format!("{what} {p:?} is not a number"),
                ));
            }
            p.parse::<u64>()
                .map_err(|_| ParseError::new(input, format!("{what} {p:?} is too large")))
        };
        let domain = num(parts[0], "domain")?;
        let server = num(parts[1], "server id")?;
        let seq = num(parts[2], "sequence number")?;
        let domain = u32::try_from(domain)
            .map_err(|_| ParseError::new(input, "domain is larger than 4294967295"))?;
        let server = u32::try_from(server)
            .map_err(|_| ParseError::new(input, "server id is larger than 4294967295"))?;
        Ok(Gtid {
            domain,
            server,
            seq,
        })
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

fn parse_list(input: &str) -> Result<Vec<Gtid>, ParseError> {
    if input.trim().is_empty() {
        return Ok(Vec::new());
    }
    input
        .split(',')
        .map(|p| {
            if p.trim().is_empty() {
                Err(ParseError::new(input, "empty element between commas"))
            } else {
                p.parse::<Gtid>()
                    .map_err(|e| ParseError::new(input, e.reason))
            }
        })
        .collect()
}

/// One GTID per domain: a replication position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GtidPos {
    by_domain: BTreeMap<u32, Gtid>,
}

impl GtidPos {
    pub fn is_empty(&self) -> bool {
        self.by_domain.is_empty()
    }

    pub fn gtids(&self) -> impl Iterator<Item = &Gtid> {
        self.by_domain.values()
    }

    pub fn domain(&self, domain: u32) -> Option<&Gtid> {
        self.by_domain.get(&domain)
    }

    /// Total of the sequence numbers: a monotone progress measure for one
    /// line of history, used only to report lag, never to decide safety.
    pub fn seq_total(&self) -> u64 {
        self.by_domain
            .values()
            .fold(0u64, |a, g| a.saturating_add(g.seq))
    }
}

impl FromStr for GtidPos {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let mut by_domain = BTreeMap::new();
        for g in parse_list(input)? {
            if by_domain.insert(g.domain, g).is_some() {
                return Err(ParseError::new(
                    input,
                    format!("domain {} appears twice in a position", g.domain),
                ));
            }
        }
        Ok(GtidPos { by_domain })
    }
}

impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        join(f, self.by_domain.values())
    }
}

fn join<'a>(f: &mut fmt::Formatter<'_>, it: impl Iterator<Item = &'a Gtid>) -> fmt::Result {
    for (i, g) in it.enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        fmt::Display::fmt(g, f)?;
    }
    Ok(())
}

/// The last sequence number of each (domain, server): `@@gtid_binlog_state`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BinlogState {
    last: BTreeMap<(u32, u32), u64>,
}

impl BinlogState {
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// Record one more event (as the server does when it writes or applies it).
    pub fn record(&mut self, g: Gtid) {
        let e = self.last.entry((g.domain, g.server)).or_insert(g.seq);
        *e = (*e).max(g.seq);
    }

    /// The history a server holds, from its binary log's state and the
    /// position its replication applier reached (`@@gtid_slave_pos`).
    ///
    /// The binary log alone is not the history: an instance cloned from a
    /// physical copy starts with an empty binary log while its data already
    /// holds everything up to the copy's position, and what it applies from
    /// then on is logged only from then on. Promoted before it had applied
    /// anything from the old primary, its binlog state names only its own
    /// writes, and every replica that holds the old primary's last write
    /// looked errant against it. The applied position is part of the data
    /// (`mysql.gtid_slave_pos` commits with each applied transaction), so
    /// each of its GTIDs is held, with everything of that server before it.
    pub fn with_applied(&self, applied: &GtidPos) -> BinlogState {
        let mut out = self.clone();
        for g in applied.gtids() {
            out.record(*g);
        }
        out
    }

    /// What a physical copy taken at `pos` holds of the history `self`
    /// describes (the donor's history, read before the copy's consistent
    /// point): each entry of a domain the copy reaches, up to the copy's
    /// sequence number there, together with the position itself. With
    /// `gtid_strict_mode` a domain's sequence numbers grow along its one
    /// history, so an entry at or below the copy's is in the copy; entries
    /// past it (written after the donor's history was read) are left out,
    /// which can only make the copy look as if it held less.
    pub fn held_by_copy_at(&self, pos: &GtidPos) -> BinlogState {
        let last = self
            .last
            .iter()
            .filter(|&(&(domain, _), &seq)| pos.domain(domain).is_some_and(|p| seq <= p.seq))
            .map(|(&k, &v)| (k, v))
            .collect();
        BinlogState { last }.with_applied(pos)
    }

    /// Each (domain, server)'s last GTID, in (domain, server) order.
    fn entries(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.last.iter().map(|(&(domain, server), &seq)| Gtid {
            domain,
            server,
            seq,
        })
    }

    /// The text `SET GLOBAL gtid_binlog_state` loads: each domain's entries
    /// in the order of their sequence numbers, so that the last one, which
    /// the server takes for the domain's current position, is the newest.
    pub fn load_text(&self) -> String {
        let mut gtids: Vec<Gtid> = self.entries().collect();
        gtids.sort_by_key(|g| (g.domain, g.seq, g.server));
        gtids
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The position this state ends at: per domain, the GTID with the highest
    /// sequence number.
    pub fn pos(&self) -> GtidPos {
        let mut by_domain: BTreeMap<u32, Gtid> = BTreeMap::new();
        for (&(domain, server), &seq) in &self.last {
            let g = Gtid {
                domain,
                server,
                seq,
            };
            match by_domain.get(&domain) {
                Some(cur) if cur.seq >= seq => {}
                _ => {
                    by_domain.insert(domain, g);
                }
            }
        }
        GtidPos { by_domain }
    }

    fn holds(&self, g: &Gtid) -> bool {
        let domain_max = self
            .last
            .range((g.domain, 0)..=(g.domain, u32::MAX))
            .map(|(_, &s)| s)
            .max();
        let same_server = self.last.get(&(g.domain, g.server)).copied();
        matches!((domain_max, same_server), (Some(m), Some(s)) if m >= g.seq && s >= g.seq)
    }

    /// Conservative: does this state provably include the history that ends at `pos`?
    pub fn contains_pos(&self, pos: &GtidPos) -> bool {
        pos.gtids().all(|g| self.holds(g))
    }

    /// Conservative: does this state provably include all of `other`?
    pub fn contains_state(&self, other: &BinlogState) -> bool {
        other.last.iter().all(|(&(domain, server), &seq)| {
            self.holds(&Gtid {
                domain,
                server,
                seq,
            })
        })
    }

    /// Server ids of the entries of `self` that `other` does not provably hold.
    pub fn sources_missing_from(&self, other: &BinlogState) -> std::collections::BTreeSet<u32> {
        self.last
            .iter()
            .filter(|&(&(domain, server), &seq)| {
                !other.holds(&Gtid {
                    domain,
                    server,
                    seq,
                })
            })
            .map(|(&(_, server), _)| server)
            .collect()
    }

    pub fn relation(&self, other: &BinlogState) -> Relation {
        Relation::from_containment(self.contains_state(other), other.contains_state(self))
    }

    /// Where what `self` holds beyond `other` begins, per domain in which it
    /// holds more: the last GTID both provably share (the highest of each
    /// server's common sequence number), as a binary log reader's start
    /// position takes it (events after it). With `gtid_strict_mode`
    /// sequence numbers grow along a domain's history, so everything after
    /// the common point is what only `self` holds.
    pub fn beyond(&self, other: &BinlogState) -> Vec<Gtid> {
        let mut out = Vec::new();
        let domains: std::collections::BTreeSet<u32> = self.last.keys().map(|k| k.0).collect();
        for d in domains {
            let mine = self.last.range((d, 0)..=(d, u32::MAX));
            let ahead = mine.clone().any(|(&(domain, server), &seq)| {
                !other.holds(&Gtid {
                    domain,
                    server,
                    seq,
                })
            });
            if !ahead {
                continue;
            }
            let common = mine
                .filter_map(|(&(domain, server), &seq)| {
                    let theirs = *other.last.get(&(domain, server))?;
                    Some(Gtid {
                        domain,
                        server,
                        seq: seq.min(theirs),
                    })
                })
                .max_by_key(|g| g.seq)
                .unwrap_or(Gtid {
                    domain: d,
                    server: 0,
                    seq: 0,
                });
            out.push(common);
        }
        out
    }
}

impl FromStr for BinlogState {
    type Err = ParseError;
    fn from_str(input: &str) -> Result<Self, ParseError> {
        let mut last = BTreeMap::new();
        for g in parse_list(input)? {
            if last.insert((g.domain, g.server), g.seq).is_some() {
                return Err(ParseError::new(
                    input,
                    format!(
                        "domain {} server {} appears twice in a binlog state",
                        g.domain, g.server
                    ),
                ));
            }
        }
        Ok(BinlogState { last })
    }
}

impl fmt::Display for BinlogState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gtids: Vec<Gtid> = self.entries().collect();
        join(f, gtids.iter())
    }
}

macro_rules! serde_as_text {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_text!(GtidPos);
serde_as_text!(BinlogState);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn st(s: &str) -> BinlogState {
        s.parse().unwrap()
    }
    fn pos(s: &str) -> GtidPos {
        s.parse().unwrap()
    }

    #[test]
    fn what_a_former_primary_alone_holds_begins_after_the_last_shared_gtid() {
        let g = |s: &str| {
            s.parse::<GtidPos>()
                .unwrap()
                .gtids()
                .copied()
                .collect::<Vec<_>>()
        };
        // Diverged at 101: the primary took over at 101 with its own writes.
        assert_eq!(st("0-1-103").beyond(&st("0-1-100,0-2-105")), g("0-1-100"));
        // Its own earlier term, another primary's, then its diverged tail.
        assert_eq!(
            st("0-1-103,0-2-100").beyond(&st("0-1-50,0-2-100,0-3-110")),
            g("0-2-100")
        );
        // Nothing beyond: nothing to save.
        assert!(st("0-1-100").beyond(&st("0-1-100,0-2-105")).is_empty());
    }

    #[test]
    fn a_cloned_then_promoted_server_holds_what_it_applied() {
        // Cloned at 0-1-205380 (empty binary log), promoted before applying
        // anything, then wrote 0-2-205381..224027.
        let binlog = st("0-2-224027");
        let applied = pos("0-1-205380");
        let held = binlog.with_applied(&applied);
        assert_eq!(held.to_string(), "0-1-205380,0-2-224027");
        // A replica that followed it holds the same: no errant source.
        let replica = st("0-1-205380,0-2-224027");
        assert!(replica.sources_missing_from(&held).is_empty());
        assert!(!replica.sources_missing_from(&binlog).is_empty());
        // A later write of server 1 (errant, after the promotion) still shows.
        let errant = st("0-1-224028,0-2-224027");
        assert_eq!(
            errant
                .sources_missing_from(&held)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
        // An older applied position changes nothing.
        assert_eq!(st("0-1-300").with_applied(&pos("0-1-200")), st("0-1-300"));
    }

    #[test]
    fn a_copy_holds_the_donors_older_servers_up_to_its_position() {
        // Server 1 wrote up to 1971, server 2 took over; the donor (server 3)
        // read its history at 0-2-4000, the copy is consistent at 0-2-4100.
        let donor = st("0-1-1971,0-2-4000,0-3-20");
        let copy = donor.held_by_copy_at(&pos("0-2-4100"));
        // 0-3-20 is older than 0-2-4000 in the one line of domain 0.
        assert_eq!(copy, st("0-1-1971,0-2-4100,0-3-20"));
        // The former primary (server 1) is then no longer taken for one
        // that holds what the copy lacks.
        assert!(copy.contains_state(&st("0-1-1971,0-2-3000")));
        // An entry past the copy's position is not claimed, nor is a domain
        // the copy does not reach.
        let later = st("0-1-1971,0-2-4000,0-4-5000,1-1-7").held_by_copy_at(&pos("0-2-4100"));
        assert_eq!(later, st("0-1-1971,0-2-4100"));
        // Loaded newest last in each domain, whatever the server ids.
        assert_eq!(st("0-9-10,0-1-30,1-5-2").load_text(), "0-9-10,0-1-30,1-5-2");
        assert_eq!(st("0-1-30,0-9-10").load_text(), "0-9-10,0-1-30");
    }

    #[test]
    fn parses_and_formats() {
        assert_eq!(pos(" 1-2-3 ,0-1-10").to_string(), "0-1-10,1-2-3");
        assert_eq!(st("0-2-20,0-1-10").to_string(), "0-1-10,0-2-20");
        assert_eq!(st("0-1-10,0-2-20,1-1-4").pos().to_string(), "0-2-20,1-1-4");
        assert!(pos("").is_empty());
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            "0-1",
            "0-1-2-3",
            "a-1-2",
            "0--2",
            "0-1-2,",
            "0-1-2,0-3-4",
            "4294967296-1-1",
            "0-1-99999999999999999999",
            "-1-1",
        ] {
            assert!(bad.parse::<GtidPos>().is_err(), "pos accepted {bad:?}");
        }
        for bad in ["0-1-2,0-1-3", "x", "0-1-2,,0-2-3"] {
            assert!(
                bad.parse::<BinlogState>().is_err(),
                "state accepted {bad:?}"
            );
        }
    }

    #[test]
    fn a_replica_behind_is_contained() {
        let primary = st("0-1-100");
        let replica = st("0-1-90");
        assert_eq!(replica.relation(&primary), Relation::Behind);
        assert!(primary.contains_pos(&pos("0-1-90")));
    }

    #[test]
    fn history_continued_by_a_new_primary_contains_the_old() {
        let new_primary = st("0-1-100,0-2-150");
        assert!(new_primary.contains_state(&st("0-1-100")));
        assert!(new_primary.contains_pos(&pos("0-1-100")));
        assert_eq!(st("0-1-100").relation(&new_primary), Relation::Behind);
    }

    #[test]
    fn lost_write_of_an_old_primary_is_divergence() {
        // The old primary wrote 0-1-101 that nobody received; the new primary
        // continued from 100 with its own 101.
        let old = st("0-1-101");
        let new = st("0-1-100,0-2-101");
        assert_eq!(old.relation(&new), Relation::Diverged);
        assert!(!new.contains_pos(&pos("0-1-101")));
    }

    #[test]
    fn errant_write_in_a_new_domain_is_divergence() {
        let replica = st("0-1-100,7-3-1");
        let primary = st("0-1-120");
        assert_eq!(replica.relation(&primary), Relation::Diverged);
    }

    #[test]
    fn sources_of_missing_transactions() {
        let replica = st("0-1-100,0-3-101");
        assert_eq!(
            replica
                .sources_missing_from(&st("0-1-100"))
                .into_iter()
                .collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(
            st("0-1-105")
                .sources_missing_from(&st("0-1-100"))
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert!(st("0-1-90").sources_missing_from(&st("0-1-100")).is_empty());
    }

    #[test]
    fn errant_write_in_same_domain_is_divergence() {
        let replica = st("0-1-100,0-3-101");
        let primary = st("0-1-120");
        assert_eq!(replica.relation(&primary), Relation::Diverged);
    }

    fn arb_state() -> impl Strategy<Value = BinlogState> {
        prop::collection::btree_map((0u32..3, 1u32..4), 1u64..50, 0..6)
            .prop_map(|last| BinlogState { last })
    }

    proptest! {
        #[test]
        fn round_trips(s in arb_state()) {
            prop_assert_eq!(s.to_string().parse::<BinlogState>().unwrap(), s.clone());
            prop_assert_eq!(s.pos().to_string().parse::<GtidPos>().unwrap(), s.pos());
        }

        #[test]
        fn containment_is_reflexive_and_transitive(a in arb_state(), b in arb_state(), c in arb_state()) {
            prop_assert!(a.contains_state(&a));
            prop_assert!(a.contains_pos(&a.pos()));
            if a.contains_state(&b) && b.contains_state(&c) {
                prop_assert!(a.contains_state(&c));
            }
        }

        /// Simulate one linear history in strict mode, replicas at prefixes of
        /// it, and a fork: prefixes are always contained, a fork never is.
        #[test]
        fn linear_prefixes_contained_forks_not(
            writers in prop::collection::vec((0u32..2, 1u32..4), 1..40),
            cut in 0usize..40,
            fork_server in 10u32..12,
        ) {
            let mut full = BinlogState::default();
            let mut prefix = BinlogState::default();
            let mut seq_by_domain = std::collections::BTreeMap::<u32, u64>::new();
            let cut = cut.min(writers.len());
            for (i, &(domain, server)) in writers.iter().enumerate() {
                let seq = seq_by_domain.entry(domain).or_insert(0);
                *seq += 1;
                let g = Gtid { domain, server, seq: *seq };
                full.record(g);
                if i < cut { prefix.record(g); }
            }
            prop_assert!(full.contains_state(&prefix));
            prop_assert!(full.contains_pos(&prefix.pos()));
            // The prefix writes one event of its own (a server that the full
            // history never used) at the next sequence number of domain 0.
            let mut forked = prefix.clone();
            let next = prefix.pos().domain(0).map(|g| g.seq).unwrap_or(0) + 1;
            forked.record(Gtid { domain: 0, server: fork_server, seq: next });
            prop_assert!(!full.contains_state(&forked));
            prop_assert_ne!(forked.relation(&full), Relation::Behind);
        }

        #[test]
        fn never_panics_on_garbage(text in "[0-9,\\- ]{0,60}") {
            let _ = text.parse::<GtidPos>();
            let _ = text.parse::<BinlogState>();
        }
    }
}
