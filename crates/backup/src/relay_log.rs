//! Archived binary log ranges turned into relay log files, so that a
//! server's own applier replays them: the events are applied as a replica
//! applies them (in parallel where the source's commit order allows it),
//! with no text rendering and no client round trip per statement.
//!
//! A relay log is a binary log as a replica's receiver writes it: the magic,
//! a format description, an artificial Rotate event naming the source's
//! file (the applier tracks source positions by it, and MariaDB's applier
//! needs one before any transaction), then the source's events unchanged.
//! Each planned file becomes one relay log: its header, that Rotate, then
//! its planned ranges back to back (an orphaned transaction between two
//! ranges is simply left out; every event carries its own checksum).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use cnmysql_api::Flavor;

use crate::binlog;
use crate::recovery_plan::Replay;

const ROTATE: u8 = 4;
/// MySQL: the GTIDs of the files before this one. Its relay log reader
/// refuses a GTID before it has read one.
const PREVIOUS_GTIDS: u8 = 35;
/// The event was made by the receiver, not by the source.
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;
const HEADER: usize = 19;

/// One relay log file written for a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayFile {
    pub path: PathBuf,
    /// Its size: the applier's position in it over this is its progress.
    pub bytes: u64,
    /// The source file it holds ranges of.
    pub source: String,
}

/// The relay log files of a replay, in order, and their index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayLogs {
    /// The base name the server is started with (`--relay-log`).
    pub base: PathBuf,
    pub index: PathBuf,
    pub files: Vec<RelayFile>,
}

impl RelayLogs {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// Bytes applied when the applier is at `pos` of the file named `name`
    /// (as `SHOW REPLICA STATUS` names it: without its directory); None
    /// for a file that is not one of ours (the server opens its own after
    /// them).
    pub fn done_bytes(&self, name: &str, pos: u64) -> Option<u64> {
        let mut done = 0;
        for f in &self.files {
            if f.path.file_name().and_then(|n| n.to_str()) == Some(name) {
                return Some(done + pos.min(f.bytes));
            }
            done += f.bytes;
        }
        None
    }
}

/// The artificial Rotate event that tells the applier the events that
/// follow come from `file` of the source, from `pos`.
pub fn rotate_event(server_id: u32, file: &str, pos: u64, checksum: bool) -> Vec<u8> {
    let size = HEADER + 8 + file.len() + if checksum { 4 } else { 0 };
    let mut ev = Vec::with_capacity(size);
    ev.extend_from_slice(&0u32.to_le_bytes()); // timestamp
    ev.push(ROTATE);
    ev.extend_from_slice(&server_id.to_le_bytes());
    ev.extend_from_slice(&(size as u32).to_le_bytes());
    ev.extend_from_slice(&0u32.to_le_bytes()); // end position: none, artificial
    ev.extend_from_slice(&LOG_EVENT_ARTIFICIAL_F.to_le_bytes());
    ev.extend_from_slice(&pos.to_le_bytes());
    ev.extend_from_slice(file.as_bytes());
    if checksum {
        let crc = crc32fast::hash(&ev);
        ev.extend_from_slice(&crc.to_le_bytes());
    }
    ev
}

/// Write each planned file of `replays` (read from `binlogs/RUN/FILE`) as
/// a relay log `dir/replay.000001`, …, and their index. Each source file is
/// removed once copied: a replay needs the room of its archive once, not
/// twice.
pub fn write(
    flavor: Flavor,
    binlogs: &Path,
    replays: &[Replay],
    dir: &Path,
) -> anyhow::Result<RelayLogs> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let naming = Naming {
        base: dir.join("replay"),
        keep_sources: false,
        in_data_dir: false,
    };
    write_as(flavor, binlogs, replays, &naming)
}

/// Where relay log files go and how the index names them.
pub struct Naming {
    /// Files `<base>.000001`, …, the index `<base>.index`.
    pub base: PathBuf,
    /// Keep the copies of the binary logs read (else they are removed).
    pub keep_sources: bool,
    /// `base` is in the server's data directory, and the index names the
    /// files as the server does there (`./<file>`): a running server
    /// matches a channel's relay log names against those.
    pub in_data_dir: bool,
}

/// The relay log files and their index, named as `naming` says (for a
/// channel a running server has not made yet: the names it would give
/// that channel's relay log).
pub fn write_as(
    flavor: Flavor,
    binlogs: &Path,
    replays: &[Replay],
    naming: &Naming,
) -> anyhow::Result<RelayLogs> {
    let base = &naming.base;
    let name = base
        .file_name()
        .and_then(|n| n.to_str())
        .context("a relay log base name")?;
    let named = |ext: &str| base.with_file_name(format!("{name}.{ext}"));
    let mut files = Vec::new();
    for r in replays.iter().filter(|r| !r.ranges.is_empty()) {
        let source = binlogs.join(&r.run).join(&r.file);
        let path = named(&format!("{:06}", files.len() + 1));
        let bytes = write_one(flavor, &source, r, &path)?;
        if !naming.keep_sources {
            std::fs::remove_file(&source).ok();
        }
        files.push(RelayFile {
            path,
            bytes,
            source: format!("{}/{}", r.run, r.file),
        });
    }
    let index = named("index");
    let listing: String = files
        .iter()
        .map(
            |f| match f.path.file_name().filter(|_| naming.in_data_dir) {
                Some(n) => format!("./{}\n", n.to_string_lossy()),
                None => format!("{}\n", f.path.display()),
            },
        )
        .collect();
    std::fs::write(&index, listing).with_context(|| format!("writing {}", index.display()))?;
    Ok(RelayLogs {
        base: base.to_path_buf(),
        index,
        files,
    })
}

/// One relay log: `source`'s header, the Rotate, its ranges. Its size.
fn write_one(flavor: Flavor, source: &Path, r: &Replay, path: &Path) -> anyhow::Result<u64> {
    let mut input =
        std::fs::File::open(source).with_context(|| format!("opening {}", source.display()))?;
    let mut header = vec![0u8; r.header_end as usize];
    input
        .read_exact(&mut header)
        .with_context(|| format!("reading the header of {}", source.display()))?;
    let scanned = binlog::scan(flavor, &header, 0, None)
        .with_context(|| format!("reading the header of {}", source.display()))?;
    let checksum = scanned.checksum_len.ok_or_else(|| {
        anyhow::anyhow!(
            "{}: no format description in its first {} bytes",
            source.display(),
            r.header_end
        )
    })? > 0;
    // The format description's own server id (bytes 5..9 of the event).
    let server_id = u32::from_le_bytes(header[9..13].try_into().expect("four bytes"));
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    out.write_all(&header)?;
    if let Some(previous) = previous_gtids(&mut input, r.header_end)? {
        out.write_all(&previous)?;
    }
    out.write_all(&rotate_event(server_id, &r.file, r.ranges[0].0, checksum))?;
    for &(a, b) in &r.ranges {
        input.seek(SeekFrom::Start(a))?;
        let copied = std::io::copy(&mut (&mut input).take(b - a), &mut out)?;
        anyhow::ensure!(
            copied == b - a,
            "{}: {a}-{b} is past its end ({copied} bytes read)",
            source.display()
        );
    }
    out.flush()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

/// The Previous_gtids event right after the format description, if the
/// file has one (MySQL writes it; MariaDB has its own list, not needed).
fn previous_gtids(input: &mut std::fs::File, at: u64) -> anyhow::Result<Option<Vec<u8>>> {
    let mut head = [0u8; HEADER];
    input.seek(SeekFrom::Start(at))?;
    if input.read_exact(&mut head).is_err() || head[4] != PREVIOUS_GTIDS {
        return Ok(None);
    }
    let size = u32::from_le_bytes(head[9..13].try_into().expect("four bytes")) as usize;
    anyhow::ensure!(
        size >= HEADER,
        "a Previous_gtids event of {size} bytes at {at}"
    );
    let mut event = head.to_vec();
    event.resize(size, 0);
    input.read_exact(&mut event[HEADER..])?;
    Ok(Some(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotate_event_reads_back_as_one_event_with_its_checksum() {
        let ev = rotate_event(7, "bin.000003", 4, true);
        assert_eq!(ev[4], ROTATE);
        assert_eq!(
            u32::from_le_bytes(ev[9..13].try_into().unwrap()) as usize,
            ev.len()
        );
        assert_eq!(u16::from_le_bytes(ev[17..19].try_into().unwrap()), 0x20);
        assert_eq!(u64::from_le_bytes(ev[19..27].try_into().unwrap()), 4);
        assert_eq!(&ev[27..ev.len() - 4], b"bin.000003");
        let crc = u32::from_le_bytes(ev[ev.len() - 4..].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&ev[..ev.len() - 4]));
        assert_eq!(rotate_event(7, "bin.000003", 4, false).len(), ev.len() - 4);
    }

    #[test]
    fn progress_counts_the_files_before_and_the_position_in_the_current_one() {
        let f = |n: &str, bytes| RelayFile {
            path: PathBuf::from(format!("/r/{n}")),
            bytes,
            source: String::new(),
        };
        let logs = RelayLogs {
            base: "/r/replay".into(),
            index: "/r/replay.index".into(),
            files: vec![f("replay.000001", 100), f("replay.000002", 50)],
        };
        assert_eq!(logs.total_bytes(), 150);
        assert_eq!(logs.done_bytes("replay.000001", 40), Some(40));
        assert_eq!(logs.done_bytes("replay.000002", 10), Some(110));
        assert_eq!(logs.done_bytes("replay.000002", 999), Some(150));
        assert_eq!(logs.done_bytes("replay.000003", 4), None);
    }

    #[test]
    fn a_relay_log_holds_the_header_and_exactly_the_planned_ranges() {
        let file = crate::binlog::tests::mariadb_file();
        let all = binlog::scan(Flavor::Mariadb, &file, 0, None).unwrap();
        let t = &all.txs;
        let tmp = tempfile::tempdir().unwrap();
        let binlogs = tmp.path().join("binlogs");
        std::fs::create_dir_all(binlogs.join("run1")).unwrap();
        std::fs::write(binlogs.join("run1/bin.000001"), &file).unwrap();
        // The second transaction is orphaned: left out between two ranges.
        let replay = Replay {
            run: "run1".into(),
            file: "bin.000001".into(),
            header_end: all.header_end.unwrap(),
            ranges: vec![(t[0].start, t[0].end), (t[2].start, t[2].end)],
        };
        let logs = write(
            Flavor::Mariadb,
            &binlogs,
            &[replay],
            &tmp.path().join("relay"),
        )
        .unwrap();
        assert_eq!(logs.files.len(), 1);
        let relay = std::fs::read(&logs.files[0].path).unwrap();
        assert_eq!(relay.len() as u64, logs.files[0].bytes);
        let read = binlog::scan(Flavor::Mariadb, &relay, 0, None).unwrap();
        let ids: Vec<String> = read.txs.iter().map(|t| t.id.to_string()).collect();
        assert_eq!(ids, ["0-1-1", "0-2-3"]);
        assert_eq!(read.rotated_to.as_deref(), Some("bin.000001"));
        let index = std::fs::read_to_string(&logs.index).unwrap();
        assert_eq!(index, format!("{}\n", logs.files[0].path.display()));
        // The archive's copy is gone once written.
        assert!(!binlogs.join("run1/bin.000001").exists());
    }
}
