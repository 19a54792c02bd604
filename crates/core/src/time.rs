//! Time as the status writes it: RFC 3339 from Unix milliseconds, and back.

/// `ms` (Unix milliseconds) as RFC 3339; the epoch for an impossible time.
pub fn timestamp(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// An RFC 3339 time as Unix milliseconds; None when it does not parse.
pub fn parse_ms(t: &str) -> Option<i64> {
    t.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_go_both_ways_and_bad_ones_are_none() {
        let t = super::timestamp(1_764_115_200_123);
        assert_eq!(t, "2025-11-26T00:00:00.123Z");
        assert_eq!(super::parse_ms(&t), Some(1_764_115_200_123));
        assert_eq!(super::parse_ms("yesterday"), None);
    }
}
