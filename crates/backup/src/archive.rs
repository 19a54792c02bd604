//! The layout of a cluster's binlog archive in the store, and what each
//! object in it holds.
//!
//! ```text
//! <prefix>/binlogs/<run>/run.json                 who archived, from what state
//! <prefix>/binlogs/<run>/<file>/<start>-<end>.zst  one piece of a binary log
//! <prefix>/binlogs/<run>/head.json                how far the run got, and when
//! ```
//!
//! A *run* is one primary archiving its binary logs; the next primary (after
//! a switchover, a failover or a restart) starts a new run, named so runs
//! sort in the order they began. Binary log file names repeat across
//! servers and restarts (every primary has its own `mysql-bin.000001`), so a
//! piece is named by its run as well as its file and byte range: nothing is
//! ever overwritten. A run starts at the beginning of a binary log file;
//! where it overlaps what the run before archived, recovery applies each
//! transaction once.
//!
//! A piece is a zstd frame (with its content checksum) of a 4-byte length,
//! the piece's index in JSON (its transactions with their GTIDs, places and
//! commit times, and the SHA-256 of its bytes) and the binary log bytes.

use std::io::{Read, Write};

use cnmysql_api::Flavor;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::binlog::Tx;

/// Where a cluster's binlog archive lives under its destination prefix.
pub const BINLOGS: &str = "binlogs";

/// The name of a run that began at `started` on `instance`: sortable by
/// time (UTC, milliseconds), then by instance.
pub fn run_name(started: jiff::Timestamp, instance: &str) -> String {
    format!(
        "{}-{instance}",
        started
            .strftime("%Y%m%dT%H%M%S%.3fZ")
            .to_string()
            .replace('.', "")
    )
}

/// The key of a run's description.
pub fn run_key(run: &str) -> String {
    format!("{BINLOGS}/{run}/run.json")
}

/// The key of a run's head.
pub fn head_key(run: &str) -> String {
    format!("{BINLOGS}/{run}/head.json")
}

/// The key of a piece.
pub fn piece_key(run: &str, file: &str, start: u64, end: u64) -> String {
    format!("{BINLOGS}/{run}/{file}/{start:016}-{end:016}.zst")
}

/// What a key under `binlogs/` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Object {
    Run {
        run: String,
    },
    Head {
        run: String,
    },
    Piece {
        run: String,
        file: String,
        start: u64,
        end: u64,
    },
}

/// Read a key relative to the destination prefix (`binlogs/...`).
pub fn parse_key(rel: &str) -> Option<Object> {
    let rest = rel.strip_prefix(BINLOGS)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [run, "run.json"] => Some(Object::Run {
            run: run.to_string(),
        }),
        [run, "head.json"] => Some(Object::Head {
            run: run.to_string(),
        }),
        [run, file, range] => {
            let range = range.strip_suffix(".zst")?;
            let (a, b) = range.split_once('-')?;
            Some(Object::Piece {
                run: run.to_string(),
                file: file.to_string(),
                start: a.parse().ok()?,
                end: b.parse().ok()?,
            })
        }
        _ => None,
    }
}

/// Who archived a run, and the history its server held when it began:
/// recovery drops what an earlier run archived that this one's history
/// does not hold (it was lost in a failover, never acknowledged).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub run: String,
    pub instance: String,
    pub flavor: Flavor,
    /// MariaDB `@@server_id`, MySQL `@@server_uuid`.
    pub server: String,
    pub started_at: jiff::Timestamp,
    /// The first file it archives (from its start).
    pub first_file: String,
    /// MariaDB: `@@gtid_binlog_pos` when it began; MySQL: `@@gtid_executed`.
    pub start_position: String,
    /// MariaDB: `@@gtid_binlog_state` when it began (for the record).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub start_state: String,
}

/// How far a run got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    pub file: String,
    /// Everything of `file` before this offset is archived.
    pub offset: u64,
    /// The last transaction archived, and when it committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<crate::binlog::TxId>,
    #[serde(default)]
    pub last_commit_us: i64,
    /// Every transaction committed before this time (microseconds since the
    /// epoch) on this run's server is archived: the binary log was read
    /// after it, and all of it stored.
    pub complete_until_us: i64,
    /// The run ended (its server stopped being primary, or stopped).
    #[serde(default)]
    pub ended: bool,
    /// The history archived through this run, once it has caught up with
    /// its server (MariaDB: a `@@gtid_binlog_state`; MySQL: a GTID set).
    /// The next run starts from the files this does not hold.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
}

/// The index of a piece.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PieceIndex {
    pub file: String,
    pub start: u64,
    pub end: u64,
    /// SHA-256 of the binary log bytes.
    pub sha256: String,
    /// Where the format description ends, in the piece that holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_end: Option<u64>,
    pub txs: Vec<Tx>,
    /// The file ends with this piece: rotated to this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_to: Option<String>,
    #[serde(default)]
    pub stopped: bool,
}

/// A piece read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub index: PieceIndex,
    pub bytes: Vec<u8>,
}

/// zstd level for pieces (small, frequent: fast).
const LEVEL: i32 = 3;

/// Encode a piece for the store.
pub fn encode(index: &PieceIndex, bytes: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(index).expect("a piece index serializes");
    let mut enc = zstd::Encoder::new(Vec::new(), LEVEL).expect("zstd encoder");
    enc.include_checksum(true).expect("zstd checksum flag");
    enc.write_all(&(json.len() as u32).to_le_bytes()).unwrap();
    enc.write_all(&json).unwrap();
    enc.write_all(bytes).unwrap();
    enc.finish().expect("zstd into memory")
}

/// The SHA-256 of bytes, hex.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Decode a stored piece, checking it is whole and what its key says.
pub fn decode(key: &str, stored: &[u8], expect: Option<(&str, u64, u64)>) -> Result<Piece, String> {
    let damaged = |why: String| format!("binlog piece {key} is damaged: {why}");
    let mut plain = Vec::new();
    zstd::Decoder::new(stored)
        .and_then(|mut d| d.read_to_end(&mut plain))
        .map_err(|e| damaged(e.to_string()))?;
    if plain.len() < 4 {
        return Err(damaged("too short".into()));
    }
    let n = u32::from_le_bytes(plain[..4].try_into().unwrap()) as usize;
    let json = plain
        .get(4..4 + n)
        .ok_or_else(|| damaged("index cut short".into()))?;
    let index: PieceIndex =
        serde_json::from_slice(json).map_err(|e| damaged(format!("index: {e}")))?;
    let bytes = plain[4 + n..].to_vec();
    if sha256(&bytes) != index.sha256 {
        return Err(damaged("its bytes do not match their SHA-256".into()));
    }
    if bytes.len() as u64 != index.end - index.start {
        return Err(damaged(format!(
            "{} bytes for the range {}-{}",
            bytes.len(),
            index.start,
            index.end
        )));
    }
    if let Some((file, start, end)) = expect
        && (file != index.file || start != index.start || end != index.end)
    {
        return Err(damaged(format!(
            "it holds {} {}-{}, its name says {file} {start}-{end}",
            index.file, index.start, index.end
        )));
    }
    Ok(Piece { index, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_run_file_and_range_and_read_back() {
        let t: jiff::Timestamp = "2026-11-24T19:30:01.234Z".parse().unwrap();
        let run = run_name(t, "db-2");
        assert_eq!(run, "20261124T193001234Z-db-2");
        let k = piece_key(&run, "mysql-bin.000001", 4, 1234);
        assert_eq!(
            parse_key(&k),
            Some(Object::Piece {
                run: run.clone(),
                file: "mysql-bin.000001".into(),
                start: 4,
                end: 1234
            })
        );
        assert_eq!(
            parse_key(&run_key(&run)),
            Some(Object::Run { run: run.clone() })
        );
        assert_eq!(parse_key(&head_key(&run)), Some(Object::Head { run }));
        assert_eq!(parse_key("base/x/backup.json"), None);
    }

    #[test]
    fn a_piece_reads_back_and_damage_is_named() {
        let bytes = b"\xfebin some binlog bytes".to_vec();
        let index = PieceIndex {
            file: "mysql-bin.000003".into(),
            start: 0,
            end: bytes.len() as u64,
            sha256: sha256(&bytes),
            header_end: Some(4),
            txs: vec![],
            rotated_to: None,
            stopped: false,
        };
        let stored = encode(&index, &bytes);
        let back = decode(
            "k",
            &stored,
            Some(("mysql-bin.000003", 0, bytes.len() as u64)),
        )
        .unwrap();
        assert_eq!(back.bytes, bytes);
        assert_eq!(back.index, index);
        let e = decode("k", &stored, Some(("mysql-bin.000004", 0, 1))).unwrap_err();
        assert!(e.contains("its name says"), "{e}");
        for i in [0, stored.len() / 2, stored.len() - 1] {
            let mut bad = stored.clone();
            bad[i] ^= 0x40;
            let e = decode("k", &bad, None).unwrap_err();
            assert!(e.contains("binlog piece k is damaged"), "{e}");
        }
    }
}
