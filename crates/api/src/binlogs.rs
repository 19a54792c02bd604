//! What an instance reports of its binary logs: how many, how large, and
//! why the oldest is still kept (`cnmysql_core::binlog_retention` decides).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `status.instanceStates.<instance>.binlogs`: the instance's binary logs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BinlogsStatus {
    /// Files kept, and their bytes.
    pub files: u32,
    pub bytes: u64,
    /// The oldest file kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oldest: String,
    /// Why the oldest file is not purged yet: who still needs what it
    /// holds (a replica, the archive, a connected reader), the retention
    /// time, or that it is the file being written.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kept_for: String,
    /// Files and bytes purged by the operator's rule since the instance
    /// manager started, and when last (RFC 3339).
    #[serde(default)]
    pub purged_files: u64,
    #[serde(default)]
    pub purged_bytes: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_purge: String,
    /// Why the files could not be read or purged, if so.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl BinlogsStatus {
    /// The same with the bytes in steps of about 1/16 of themselves, so
    /// that the file being written does not rewrite the Cluster's status
    /// at every poll; the metrics are exact.
    pub fn coarse(&self) -> BinlogsStatus {
        let step = |b: u64| match b.checked_ilog2() {
            Some(bits) if bits > 4 => b & !((1u64 << (bits - 4)) - 1),
            _ => b,
        };
        BinlogsStatus {
            bytes: step(self.bytes),
            purged_bytes: step(self.purged_bytes),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_bytes_move_in_steps_of_a_sixteenth() {
        let b = |bytes| BinlogsStatus {
            bytes,
            ..Default::default()
        };
        assert_eq!(b(0).coarse().bytes, 0);
        assert_eq!(b(17).coarse().bytes, 17);
        assert_eq!(b(1_000_000).coarse().bytes, 983_040);
        assert_eq!(b(1_000_000).coarse(), b(1_010_000).coarse());
        assert_ne!(b(1_000_000).coarse(), b(1_070_000).coarse());
    }
}
