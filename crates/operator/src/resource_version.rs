//! Which of two copies of one object is newer, by resourceVersion. Since
//! Kubernetes 1.35 (KEP-5504, stable) the versions of one resource are
//! positive decimal integers without leading zeros, comparable as numbers;
//! a value of another shape (an API server not backed by etcd) compares
//! as unknown.

use std::cmp::Ordering;

/// `a` against `b`; `None` when either is not a comparable version.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    let valid =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit());
    (valid(a) && valid(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// Whether `a` is provably older than `b`.
pub fn older(a: Option<&str>, b: Option<&str>) -> bool {
    matches!(
        a.zip(b).and_then(|(a, b)| compare(a, b)),
        Some(Ordering::Less)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers_of_any_length() {
        assert_eq!(compare("99", "100"), Some(Ordering::Less));
        assert_eq!(compare("100", "99"), Some(Ordering::Greater));
        assert_eq!(compare("123", "123"), Some(Ordering::Equal));
        assert_eq!(
            compare("18446744073709551616", "18446744073709551615"),
            Some(Ordering::Greater),
            "past u64"
        );
        assert!(older(Some("99"), Some("100")));
        assert!(!older(Some("100"), Some("100")));
    }

    #[test]
    fn a_version_of_another_shape_is_never_older() {
        for odd in ["", "0", "012", "abc", "12a", "-5"] {
            assert_eq!(compare(odd, "5"), None, "{odd:?}");
            assert!(!older(Some(odd), Some("5")));
            assert!(!older(Some("5"), Some(odd)));
        }
        assert!(!older(None, Some("5")));
        assert!(!older(Some("5"), None));
    }
}
