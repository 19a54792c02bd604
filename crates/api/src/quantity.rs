//! Storage quantities as Kubernetes writes them (`10Gi`, `500M`,
//! `1.5Ti`): whether a text is one, and the bytes it stands for. A leaf:
//! it imports nothing of this crate.

/// A positive Kubernetes quantity with an optional binary or decimal suffix
/// (`10Gi`, `500M`, `1.5Ti`).
pub(crate) fn is_storage_quantity(s: &str) -> bool {
    let suffixes = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E", "",
    ];
    suffixes.iter().any(|suf| {
        s.strip_suffix(suf).is_some_and(|num| {
            let mut parts = num.splitn(2, '.');
            let whole = parts.next().unwrap_or("");
            let frac = parts.next();
            !whole.is_empty()
                && whole.bytes().all(|b| b.is_ascii_digit())
                && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
                && num.bytes().any(|b| b != b'0' && b != b'.')
        })
    })
}

/// The bytes a storage quantity stands for (`10Gi`, `500M`, `1.5Ti`,
/// `1073741824`); None when it is not one.
pub fn quantity_bytes(s: &str) -> Option<u128> {
    if !is_storage_quantity(s) {
        return None;
    }
    let units: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (num, unit) = units
        .iter()
        .find_map(|(suf, u)| s.strip_suffix(suf).map(|n| (n, *u)))
        .unwrap_or((s, 1));
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let scale = 10u128.checked_pow(frac.len() as u32)?;
    let digits: u128 = format!("{whole}{frac}").parse().ok()?;
    Some(digits.checked_mul(unit)? / scale)
}

#[cfg(test)]
mod tests;
