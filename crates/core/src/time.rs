//! Time as the status writes it: RFC 3339 from Unix milliseconds.

/// `ms` (Unix milliseconds) as RFC 3339; the epoch for an impossible time.
pub fn timestamp(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}
