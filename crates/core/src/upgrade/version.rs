//! Server versions: parsing and comparing them, the version an image's tag
//! states, and which moves of the data between versions are allowed.

use std::cmp::Ordering;

use cnmysql_api::Flavor;

/// A server version: its numeric components (`10.11.19` → 10, 11, 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(Vec<u64>);

impl Version {
    /// The leading `N.N[.N]` of `text` (`10.11.19-MariaDB-0+deb12u1` →
    /// 10.11.19); None without at least major.minor.
    pub fn parse(text: &str) -> Option<Version> {
        let lead: String = text
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let parts: Vec<u64> = lead
            .split('.')
            .take(3)
            .map_while(|p| p.parse().ok())
            .collect();
        (parts.len() >= 2).then_some(Version(parts))
    }

    /// Compared on the components both state (`10.11` equals `10.11.19`).
    pub fn compare(&self, other: &Version) -> Ordering {
        self.0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| a.cmp(b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// major.minor.
    pub fn series(&self) -> (u64, u64) {
        (self.0[0], self.0[1])
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Why a physical copy of a server running `source` cannot be started by
/// the server `here` (None when it can): a copy of data files needs the
/// same major.minor series on both sides (a newer patch release here is
/// fine, an older one is a downgrade).
pub fn physical_copy_refusal(source: &str, here: &str) -> Option<String> {
    let (Some(s), Some(h)) = (Version::parse(source), Version::parse(here)) else {
        return Some(format!(
            "cannot tell the versions apart (source {source:?}, here {here:?})"
        ));
    };
    if s.series() != h.series() {
        return Some(format!(
            "the source runs {s} and this Cluster {h}: a physical copy needs the same series on both sides"
        ));
    }
    h.compare(&s).is_lt().then(|| {
        format!("the source runs {s}, newer than this Cluster's {h}: starting its data here would be a downgrade")
    })
}

/// Whether `text` states the version `want` (on the components `want`
/// states).
pub fn matches(text: &str, want: &str) -> bool {
    match (Version::parse(text), Version::parse(want)) {
        (Some(a), Some(b)) => a.compare(&b).is_eq(),
        _ => false,
    }
}

/// The version an image's tag states (`docker.io/library/mariadb:10.11.19`
/// → 10.11.19); None for `latest`, digests and tags without one.
pub fn tag_version(image: &str) -> Option<String> {
    let last = image.rsplit('/').next()?;
    let last = last.split('@').next()?;
    let (_, tag) = last.split_once(':')?;
    Version::parse(tag).map(|v| v.to_string())
}

/// MySQL's long-term releases: an upgrade may not skip one.
const MYSQL_LTS: &[(u64, u64)] = &[(5, 7), (8, 0), (8, 4), (9, 7)];

/// Whether the data that has run `from` may be moved to `to`: never lower,
/// and for MySQL never past a long-term release (upgrade to it first).
pub fn check_path(flavor: Flavor, from: &Version, to: &Version) -> Result<(), String> {
    if to.compare(from).is_lt() {
        return Err(format!(
            "{to} is lower than {from}, which has run on the data: a downgrade is not supported (the server cannot read data a newer version wrote)"
        ));
    }
    if flavor == Flavor::Mysql {
        let skipped: Vec<String> = MYSQL_LTS
            .iter()
            .filter(|lts| **lts > from.series() && **lts < to.series())
            .map(|(a, b)| format!("{a}.{b}"))
            .collect();
        if !skipped.is_empty() {
            return Err(format!(
                "MySQL cannot go from {from} to {to} at once: it skips the long-term release {}; upgrade to {} first",
                skipped.join(", "),
                skipped[0]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_physical_copy_keeps_its_series_and_never_goes_back() {
        assert_eq!(
            physical_copy_refusal("10.11.19-MariaDB-log", "10.11.19"),
            None
        );
        assert_eq!(physical_copy_refusal("10.11.18-MariaDB", "10.11.19"), None);
        assert!(physical_copy_refusal("10.11.19-MariaDB", "10.11.18").is_some());
        assert!(physical_copy_refusal("10.6.20-MariaDB", "10.11.19").is_some());
        assert!(physical_copy_refusal("11.8.2-MariaDB", "10.11.19").is_some());
        assert!(physical_copy_refusal("", "10.11.19").is_some());
    }
}
