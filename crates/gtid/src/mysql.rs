//! MySQL / Percona GTID sets: `uuid[:tag]:interval[:interval…][,…]`.
//!
//! Intervals are kept sorted, merged and inclusive, so two equal sets always
//! have the same canonical text. Tags (MySQL 8.4 `uuid:tag:1-5`) are part of
//! the key of a range list.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::{ParseError, Relation};

/// Largest transaction number MySQL accepts (2^63 - 1).
pub const MAX_GNO: u64 = i64::MAX as u64;

/// Source identity of a range list: the server UUID and an optional tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sid {
    /// Lower-case hyphenated UUID.
    pub uuid: String,
    /// Lower-case tag, empty for untagged transactions.
    pub tag: String,
}

/// Inclusive interval `start..=end` with `1 <= start <= end <= MAX_GNO`.
type Interval = (u64, u64);

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GtidSet {
    ranges: BTreeMap<Sid, Vec<Interval>>,
}

fn parse_uuid(text: &str, whole: &str) -> Result<String, ParseError> {
    let t = text.trim();
    let groups: Vec<&str> = t.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    if groups.len() != 5
        || groups
            .iter()
            .zip(lens)
            .any(|(g, l)| g.len() != l || !g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(ParseError::new(
            whole,
            format!("{t:?} is not a server UUID (8-4-4-4-12 hex digits)"),
        ));
    }
    Ok(t.to_ascii_lowercase())
}

fn parse_tag(text: &str, whole: &str) -> Result<String, ParseError> {
    let ok_first = |b: u8| b.is_ascii_alphabetic() || b == b'_';
    let ok_rest = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = text.as_bytes();
    if bytes.is_empty()
        || bytes.len() > 32
        || !ok_first(bytes[0])
        || !bytes.iter().all(|b| ok_rest(*b))
    {
        return Err(ParseError::new(
            whole,
            format!("{text:?} is not a GTID tag (letter or _, then up to 31 letters, digits or _)"),
        ));
    }
    Ok(text.to_ascii_lowercase())
}

fn parse_gno(text: &str, whole: &str) -> Result<u64, ParseError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::new(
            whole,
            format!("{text:?} is not a transaction number"),
        ));
    }
    let n: u64 = text
        .parse()
        .map_err(|_| ParseError::new(whole, format!("{text:?} is too large")))?;
    if n == 0 || n > MAX_GNO {
        return Err(ParseError::new(
            whole,
            format!("transaction number {n} is outside 1..={MAX_GNO}"),
        ));
    }
    Ok(n)
}

fn parse_interval(text: &str, whole: &str) -> Result<Interval, ParseError> {
    match text.split_once('-') {
        None => {
            let n = parse_gno(text, whole)?;
            Ok((n, n))
        }
        Some((a, b)) => {
            let (a, b) = (parse_gno(a, whole)?, parse_gno(b, whole)?);
            if b < a {
                return Err(ParseError::new(
                    whole,
                    format!("interval {text:?} ends before it starts"),
                ));
            }
            Ok((a, b))
        }
    }
}

/// Merge a list of intervals into sorted, disjoint, non-adjacent form.
fn normalize(mut v: Vec<Interval>) -> Vec<Interval> {
    v.sort_unstable();
    let mut out: Vec<Interval> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn intersect(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let s = a[i].0.max(b[j].0);
        let e = a[i].1.min(b[j].1);
        if s <= e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn subtract(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(s0, e) in a {
        let mut s = s0;
        while j < b.len() && b[j].1 < s {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 <= e && s <= e {
            if b[k].0 > s {
                out.push((s, b[k].0 - 1));
            }
            if b[k].1 >= e {
                s = e.saturating_add(1);
                if e == u64::MAX {
                    break;
                }
            } else {
                s = b[k].1 + 1;
            }
            k += 1;
        }
        if s <= e {
            out.push((s, e));
        }
    }
    out
}

impl GtidSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The sources present in the set, in order.
    pub fn sids(&self) -> impl Iterator<Item = &Sid> {
        self.ranges.keys()
    }

    /// Number of transactions in the set (saturating).
    pub fn count(&self) -> u64 {
        self.ranges
            .values()
            .flatten()
            .fold(0u64, |acc, (s, e)| acc.saturating_add(e - s + 1))
    }

    /// Add one transaction.
    pub fn insert(&mut self, uuid: &str, tag: &str, gno: u64) -> Result<(), ParseError> {
        let whole = format!("{uuid}:{tag}:{gno}");
        let sid = Sid {
            uuid: parse_uuid(uuid, &whole)?,
            tag: if tag.is_empty() {
                String::new()
            } else {
                parse_tag(tag, &whole)?
            },
        };
        if gno == 0 || gno > MAX_GNO {
            return Err(ParseError::new(&whole, "transaction number out of range"));
        }
        let v = self.ranges.entry(sid).or_default();
        v.push((gno, gno));
        *v = normalize(std::mem::take(v));
        Ok(())
    }

    pub fn contains_gtid(&self, uuid: &str, tag: &str, gno: u64) -> bool {
        let sid = Sid {
            uuid: uuid.to_ascii_lowercase(),
            tag: tag.to_ascii_lowercase(),
        };
        self.ranges
            .get(&sid)
            .is_some_and(|v| v.iter().any(|&(s, e)| s <= gno && gno <= e))
    }

    fn combine(
        &self,
        other: &GtidSet,
        f: impl Fn(&[Interval], &[Interval]) -> Vec<Interval>,
    ) -> GtidSet {
        let empty: Vec<Interval> = Vec::new();
        let mut ranges = BTreeMap::new();
        for sid in self.ranges.keys().chain(other.ranges.keys()) {
            if ranges.contains_key(sid) {
                continue;
            }
            let a = self.ranges.get(sid).unwrap_or(&empty);
            let b = other.ranges.get(sid).unwrap_or(&empty);
            let v = f(a, b);
            if !v.is_empty() {
                ranges.insert(sid.clone(), v);
            }
        }
        GtidSet { ranges }
    }

    pub fn union(&self, other: &GtidSet) -> GtidSet {
        self.combine(other, |a, b| {
            normalize(a.iter().chain(b).copied().collect())
        })
    }

    pub fn intersection(&self, other: &GtidSet) -> GtidSet {
        self.combine(other, intersect)
    }

    /// Transactions of `self` that `other` lacks.
    pub fn subtract(&self, other: &GtidSet) -> GtidSet {
        self.combine(other, subtract)
    }

    pub fn is_subset(&self, other: &GtidSet) -> bool {
        self.subtract(other).is_empty()
    }

    pub fn relation(&self, other: &GtidSet) -> Relation {
        Relation::from_containment(other.is_subset(self), self.is_subset(other))
    }
}

impl FromStr for GtidSet {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        let mut raw: BTreeMap<Sid, Vec<Interval>> = BTreeMap::new();
        if input.trim().is_empty() {
            return Ok(GtidSet::default());
        }
        for element in input.split(',') {
            let element = element.trim();
            if element.is_empty() {
                return Err(ParseError::new(input, "empty element between commas"));
            }
            let mut tokens = element.split(':');
            let uuid = parse_uuid(tokens.next().unwrap_or_default(), input)?;
            let mut tag = String::new();
            let mut intervals_for_tag = 0usize;
            let mut any = false;
            for token in tokens {
                let token = token.trim();
                let first = token.bytes().next();
                if first.is_some_and(|b| b.is_ascii_alphabetic() || b == b'_') {
                    if !tag.is_empty() && intervals_for_tag == 0 {
                        return Err(ParseError::new(
                            input,
                            format!("tag {tag:?} has no interval"),
                        ));
                    }
                    tag = parse_tag(token, input)?;
                    intervals_for_tag = 0;
                } else {
                    let iv = parse_interval(token, input)?;
                    raw.entry(Sid {
                        uuid: uuid.clone(),
                        tag: tag.clone(),
                    })
                    .or_default()
                    .push(iv);
                    intervals_for_tag += 1;
                    any = true;
                }
            }
            if !any || intervals_for_tag == 0 {
                return Err(ParseError::new(
                    input,
                    format!("{element:?} has no transaction interval"),
                ));
            }
        }
        let ranges = raw.into_iter().map(|(k, v)| (k, normalize(v))).collect();
        Ok(GtidSet { ranges })
    }
}

impl fmt::Display for GtidSet {
    /// Canonical text: UUIDs in order, untagged intervals first, then tags in
    /// order; elements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut current_uuid: Option<&str> = None;
        for (sid, intervals) in &self.ranges {
            if current_uuid != Some(sid.uuid.as_str()) {
                if current_uuid.is_some() {
                    f.write_str(",")?;
                }
                f.write_str(&sid.uuid)?;
                current_uuid = Some(&sid.uuid);
            }
            if !sid.tag.is_empty() {
                write!(f, ":{}", sid.tag)?;
            }
            for (s, e) in intervals {
                if s == e {
                    write!(f, ":{s}")?;
                } else {
                    write!(f, ":{s}-{e}")?;
                }
            }
        }
        Ok(())
    }
}

impl serde::Serialize for GtidSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GtidSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";

    fn set(s: &str) -> GtidSet {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_canonicalises() {
        let s = set(&format!(
            " {B}:5, {}:1-3:4:10-12,\n{B}:1-2",
            A.to_uppercase()
        ));
        assert_eq!(s.to_string(), format!("{A}:1-4:10-12,{B}:1-2:5"));
        assert_eq!(s.count(), 4 + 3 + 3);
        assert_eq!(set("").to_string(), "");
    }

    #[test]
    fn parses_tags() {
        let s = set(&format!("{A}:1-3:Blue:5:red:1-2,{A}:blue:6"));
        assert_eq!(s.to_string(), format!("{A}:1-3:blue:5-6:red:1-2"));
        assert!(s.contains_gtid(A, "BLUE", 6));
        assert!(!s.contains_gtid(A, "", 5));
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            "x",
            "3e11fa47-71ca-11e1-9e33:1",
            A,
            &format!("{A}:"),
            &format!("{A}:0"),
            &format!("{A}:5-3"),
            &format!("{A}:1-"),
            &format!("{A}:-1"),
            &format!("{A}:1,,{B}:1"),
            &format!("{A}:99999999999999999999"),
            &format!("{A}:9223372036854775808"),
            &format!("{A}:tag"),
            &format!("{A}:1:t1:t2:3"),
            &format!("{A}:1:9tag:3"),
        ] {
            assert!(bad.parse::<GtidSet>().is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn sources_missing() {
        let a = set(&format!("{A}:1-10,{B}:1-2"));
        let b = set(&format!("{A}:1-5"));
        let h = |s: &GtidSet| crate::History::Mysql(s.clone());
        assert_eq!(
            h(&a).sources_missing_from(&h(&b)),
            vec![A.to_string(), B.to_string()]
        );
        assert!(h(&b).sources_missing_from(&h(&a)).is_empty());
    }

    #[test]
    fn algebra_examples() {
        let a = set(&format!("{A}:1-10,{B}:1-5"));
        let b = set(&format!("{A}:5-20"));
        assert_eq!(a.union(&b).to_string(), format!("{A}:1-20,{B}:1-5"));
        assert_eq!(a.intersection(&b).to_string(), format!("{A}:5-10"));
        assert_eq!(a.subtract(&b).to_string(), format!("{A}:1-4,{B}:1-5"));
        assert_eq!(b.subtract(&a).to_string(), format!("{A}:11-20"));
        assert!(set(&format!("{A}:2-3")).is_subset(&a));
        assert_eq!(a.relation(&b), Relation::Diverged);
        assert_eq!(set(&format!("{A}:1-3")).relation(&a), Relation::Behind);
        assert_eq!(a.relation(&set(&format!("{A}:1-3"))), Relation::Ahead);
        assert_eq!(a.relation(&a.clone()), Relation::Equal);
    }

    fn arb_set() -> impl Strategy<Value = GtidSet> {
        let sid = prop_oneof![Just((A, "")), Just((B, "")), Just((A, "t"))];
        prop::collection::vec((sid, 1u64..60, 0u64..8), 0..8).prop_map(|v| {
            let mut s = GtidSet::new();
            for ((u, t), start, len) in v {
                for g in start..=start + len {
                    s.insert(u, t, g).unwrap();
                }
            }
            s
        })
    }

    fn members(s: &GtidSet) -> std::collections::BTreeSet<(Sid, u64)> {
        s.ranges
            .iter()
            .flat_map(|(k, v)| {
                v.iter()
                    .flat_map(move |&(a, b)| (a..=b).map(move |g| (k.clone(), g)))
            })
            .collect()
    }

    proptest! {
        #[test]
        fn round_trips(s in arb_set()) {
            let again: GtidSet = s.to_string().parse().unwrap();
            prop_assert_eq!(&again, &s);
        }

        #[test]
        fn matches_naive_set_semantics(a in arb_set(), b in arb_set()) {
            let (ma, mb) = (members(&a), members(&b));
            prop_assert_eq!(members(&a.union(&b)), ma.union(&mb).cloned().collect());
            prop_assert_eq!(members(&a.intersection(&b)), ma.intersection(&mb).cloned().collect());
            prop_assert_eq!(members(&a.subtract(&b)), ma.difference(&mb).cloned().collect());
            prop_assert_eq!(a.is_subset(&b), ma.is_subset(&mb));
            prop_assert_eq!(a.count() as usize, ma.len());
        }

        #[test]
        fn relation_is_antisymmetric(a in arb_set(), b in arb_set()) {
            let (ab, ba) = (a.relation(&b), b.relation(&a));
            let flipped = match ab {
                Relation::Ahead => Relation::Behind,
                Relation::Behind => Relation::Ahead,
                r => r,
            };
            prop_assert_eq!(ba, flipped);
        }

        #[test]
        fn never_panics_on_garbage(text in "\\PC{0,80}") {
            let _ = text.parse::<GtidSet>();
        }

        #[test]
        fn never_panics_on_near_misses(text in "[0-9a-fA-F:,\\- t]{0,120}") {
            if let Ok(s) = text.parse::<GtidSet>() {
                prop_assert_eq!(s.to_string().parse::<GtidSet>().unwrap(), s);
            }
        }
    }
}
