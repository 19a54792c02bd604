//! Reading a binary log file as the server writes it: which transactions it
//! holds, where each begins and ends, its GTID and when it committed. The
//! archiver cuts pieces at transaction boundaries with it, so a piece never
//! holds half a transaction, and indexes each piece by the GTIDs in it;
//! recovery turns a target into byte positions with the same index.
//!
//! Both flavours write version 4 binary logs: a 4-byte magic, then events,
//! each with a 19-byte header (timestamp, type, server id, size, end
//! position, flags). They differ in how a transaction is marked: MySQL
//! writes a `GTID_LOG_EVENT` (UUID and number, with the commit time in
//! microseconds) and then `BEGIN`; MariaDB writes one `GTID_EVENT` (domain,
//! server id from the header, sequence number) that also opens the
//! transaction. `mysql_common`, which reads MySQL's events, knows none of
//! MariaDB's, so this small reader reads only what it needs of both.

use std::fmt;
use std::str::FromStr;

use cnmysql_api::Flavor;

pub const MAGIC: &[u8; 4] = b"\xfebin";
const HEADER: usize = 19;

const QUERY: u8 = 2;
const STOP: u8 = 3;
const ROTATE: u8 = 4;
const FORMAT_DESCRIPTION: u8 = 15;
const XID: u8 = 16;
const MYSQL_GTID: u8 = 33;
const MYSQL_ANONYMOUS_GTID: u8 = 34;
const MYSQL_TRANSACTION_PAYLOAD: u8 = 40;
const MYSQL_GTID_TAGGED: u8 = 42;
const MARIADB_GTID: u8 = 162;
/// MariaDB's GTID event flag: the transaction is this one statement.
const MARIADB_FL_STANDALONE: u8 = 1;

/// A transaction's identity, whatever the flavour.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxId {
    /// `domain-server-seq`.
    Mariadb(cnmysql_gtid::mariadb::Gtid),
    /// `uuid:gno` (untagged; a tag is kept as `uuid:tag:gno`).
    Mysql { uuid: String, tag: String, gno: u64 },
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxId::Mariadb(g) => write!(f, "{g}"),
            TxId::Mysql { uuid, tag, gno } if tag.is_empty() => write!(f, "{uuid}:{gno}"),
            TxId::Mysql { uuid, tag, gno } => write!(f, "{uuid}:{tag}:{gno}"),
        }
    }
}

impl FromStr for TxId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains(':') {
            let parts: Vec<&str> = s.split(':').collect();
            let (uuid, tag, gno) = match parts.as_slice() {
                [u, n] => (*u, "", *n),
                [u, t, n] => (*u, *t, *n),
                _ => return Err(format!("{s:?} is not a MySQL GTID (uuid:number)")),
            };
            let gno = gno
                .parse()
                .map_err(|_| format!("{s:?} is not a MySQL GTID (uuid:number)"))?;
            Ok(TxId::Mysql {
                uuid: uuid.to_ascii_lowercase(),
                tag: tag.to_string(),
                gno,
            })
        } else {
            s.parse()
                .map(TxId::Mariadb)
                .map_err(|e: cnmysql_gtid::ParseError| e.to_string())
        }
    }
}

impl serde::Serialize for TxId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TxId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One whole transaction in a binary log file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tx {
    #[serde(rename = "g")]
    pub id: TxId,
    /// Offset of its first event (the GTID event).
    #[serde(rename = "s")]
    pub start: u64,
    /// Offset just past its last event.
    #[serde(rename = "e")]
    pub end: u64,
    /// When it committed, microseconds since the epoch (MySQL records the
    /// microsecond; MariaDB's events carry whole seconds).
    #[serde(rename = "t")]
    pub commit_us: i64,
}

/// What one read of a stretch of a binary log found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Whole transactions, in order.
    pub txs: Vec<Tx>,
    /// Offset up to which everything read is whole: the end of the last
    /// whole transaction or of an event outside any transaction. The next
    /// read starts here.
    pub boundary: u64,
    /// Where the format description event ends, when it was read (a
    /// replay needs the file from 0 to here before any other position).
    pub header_end: Option<u64>,
    /// Checksum bytes at the end of each event, when the format
    /// description was read.
    pub checksum_len: Option<usize>,
    /// The file ends here: the server rotated to this file.
    pub rotated_to: Option<String>,
    /// The server stopped; nothing more is written to this file.
    pub stopped: bool,
    /// Where the last whole event ends (at or past `boundary`): a read may
    /// be cut here, inside a transaction too large for one piece, carrying
    /// `open` into the next read.
    pub event_boundary: u64,
    /// The transaction open at `event_boundary`, if any.
    pub open: Option<OpenTx>,
}

impl Scanned {
    /// The file is complete: nothing more will be written to it.
    pub fn closed(&self) -> bool {
        self.rotated_to.is_some() || self.stopped
    }
}

/// How a binary log was read wrongly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub offset: u64,
    pub reason: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed binary log at offset {}: {}",
            self.offset, self.reason
        )
    }
}

impl std::error::Error for Malformed {}

/// A transaction being read, carried from one read to the next when a
/// read ends inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenTx {
    id: TxId,
    start: u64,
    commit_us: i64,
    /// MySQL: whether `BEGIN` followed; MariaDB: not a standalone statement.
    multi: Option<bool>,
}

/// Read `data`, the bytes of a binary log from `offset` (0: the file's
/// start, magic included; otherwise a boundary an earlier read returned).
/// `checksum_len` is what an earlier read of the format description found
/// (ignored when reading from 0). Whatever is incomplete at the end (a
/// transaction or event still being written) is left for the next read.
pub fn scan(
    flavor: Flavor,
    data: &[u8],
    offset: u64,
    checksum_len: Option<usize>,
) -> Result<Scanned, Malformed> {
    scan_from(flavor, data, offset, checksum_len, None)
}

/// [`scan`] from an event boundary inside the transaction `open` (an
/// earlier read's `open` at its `event_boundary`).
pub fn scan_from(
    flavor: Flavor,
    data: &[u8],
    offset: u64,
    checksum_len: Option<usize>,
    open: Option<OpenTx>,
) -> Result<Scanned, Malformed> {
    let mut out = Scanned {
        boundary: offset,
        event_boundary: offset,
        checksum_len,
        ..Default::default()
    };
    let mut at = 0usize;
    if offset == 0 {
        if data.len() < MAGIC.len() {
            return Ok(out);
        }
        if &data[..4] != MAGIC {
            return Err(Malformed {
                offset: 0,
                reason: "not a binary log (wrong magic number)".into(),
            });
        }
        at = 4;
        out.boundary = 4;
        out.event_boundary = 4;
    }
    let mut open = open;
    while data.len() - at >= HEADER {
        let h = &data[at..at + HEADER];
        let pos = offset + at as u64;
        let when = u32::from_le_bytes(h[0..4].try_into().unwrap()) as i64;
        let kind = h[4];
        let server_id = u32::from_le_bytes(h[5..9].try_into().unwrap());
        let size = u32::from_le_bytes(h[9..13].try_into().unwrap()) as usize;
        if size < HEADER {
            return Err(Malformed {
                offset: pos,
                reason: format!("event size {size} is smaller than its header"),
            });
        }
        if data.len() - at < size {
            break;
        }
        let event = &data[at..at + size];
        let end = pos + size as u64;
        if kind == FORMAT_DESCRIPTION {
            // Servers that know checksums end the description with the
            // algorithm (0 off, 1 CRC32) and a 4-byte checksum.
            if size < HEADER + 5 {
                return Err(Malformed {
                    offset: pos,
                    reason: "format description event too short".into(),
                });
            }
            out.checksum_len = Some(if event[size - 5] == 1 { 4 } else { 0 });
            out.header_end = Some(end);
        }
        let crc = out.checksum_len.ok_or_else(|| Malformed {
            offset: pos,
            reason: "an event before the format description".into(),
        })?;
        if size < HEADER + crc {
            return Err(Malformed {
                offset: pos,
                reason: format!("event size {size} leaves no room for its checksum"),
            });
        }
        let body = &event[HEADER..size - crc];
        at += size;
        out.event_boundary = end;
        let event = Event {
            kind,
            server_id,
            body,
            pos,
            end,
            commit_us: when * 1_000_000,
        };
        on_event(flavor, &event, &mut open, &mut out)?;
    }
    out.open = open;
    Ok(out)
}

/// One event of a binary log as [`scan_from`] reads it.
struct Event<'a> {
    kind: u8,
    server_id: u32,
    body: &'a [u8],
    pos: u64,
    end: u64,
    commit_us: i64,
}

/// What one event does to the transaction `open` and to `out`: a GTID
/// event opens one, the event that ends it records it, and outside a
/// transaction rotate and stop events are noted.
fn on_event(
    flavor: Flavor,
    e: &Event<'_>,
    open: &mut Option<OpenTx>,
    out: &mut Scanned,
) -> Result<(), Malformed> {
    let Event {
        kind,
        server_id,
        body,
        pos,
        end,
        commit_us,
    } = *e;
    match (kind, &mut *open) {
        (MYSQL_GTID | MYSQL_GTID_TAGGED | MYSQL_ANONYMOUS_GTID, _) if flavor == Flavor::Mysql => {
            let (id, us) = mysql_gtid(kind, body).map_err(|reason| Malformed {
                offset: pos,
                reason: reason.into(),
            })?;
            *open = Some(OpenTx {
                id,
                start: pos,
                commit_us: us.unwrap_or(commit_us),
                multi: None,
            });
        }
        (MARIADB_GTID, _) if flavor == Flavor::Mariadb => {
            if body.len() < 13 {
                return Err(Malformed {
                    offset: pos,
                    reason: "GTID event too short".into(),
                });
            }
            let seq = u64::from_le_bytes(body[0..8].try_into().unwrap());
            let domain = u32::from_le_bytes(body[8..12].try_into().unwrap());
            let standalone = body[12] & MARIADB_FL_STANDALONE != 0;
            *open = Some(OpenTx {
                id: TxId::Mariadb(cnmysql_gtid::mariadb::Gtid {
                    domain,
                    server: server_id,
                    seq,
                }),
                start: pos,
                commit_us,
                multi: Some(!standalone),
            });
        }
        (_, Some(tx)) => {
            // Inside a transaction: does this event end it?
            let done = match (flavor, tx.multi) {
                (Flavor::Mysql, None) => {
                    // The first event after the GTID says what follows.
                    if kind == QUERY && query_text(body).is_some_and(is_begin) {
                        tx.multi = Some(true);
                        false
                    } else {
                        // A DDL statement or a compressed payload: the
                        // transaction is this one event.
                        true
                    }
                }
                (_, Some(true)) => {
                    kind == XID || (kind == QUERY && query_text(body).is_some_and(is_end))
                }
                // MariaDB standalone: the statement ends it.
                (_, _) => kind == QUERY || kind == XID || kind == MYSQL_TRANSACTION_PAYLOAD,
            };
            if flavor == Flavor::Mariadb && tx.commit_us < commit_us {
                // MariaDB's events carry the statement's start: the
                // last one's is the nearest to the commit.
                tx.commit_us = commit_us;
            }
            if done {
                let tx = open.take().unwrap();
                out.txs.push(Tx {
                    id: tx.id,
                    start: tx.start,
                    end,
                    commit_us: tx.commit_us,
                });
                out.boundary = end;
            }
        }
        (_, None) => {
            if kind == ROTATE && body.len() >= 8 {
                out.rotated_to = Some(String::from_utf8_lossy(&body[8..]).into_owned());
            }
            if kind == STOP {
                out.stopped = true;
            }
            out.boundary = end;
        }
    }
    Ok(())
}

/// A MySQL GTID event's transaction and, when recorded, its commit time.
fn mysql_gtid(kind: u8, body: &[u8]) -> Result<(TxId, Option<i64>), &'static str> {
    if kind == MYSQL_GTID_TAGGED {
        // Tagged GTIDs (8.3+) are serialized differently and
        // cloudnative-mysql never writes them: refuse rather than guess.
        return Err("a tagged GTID (SET gtid_next with a tag) cannot be archived");
    }
    if kind == MYSQL_ANONYMOUS_GTID {
        return Err("a transaction without a GTID (gtid_mode is not ON)");
    }
    if body.len() < 25 {
        return Err("GTID event too short");
    }
    let uuid = uuid_text(&body[1..17]);
    let gno = u64::from_le_bytes(body[17..25].try_into().unwrap());
    // Logical clock (type byte, two 8-byte numbers), then the immediate
    // commit timestamp: 7 bytes, its top bit saying the original one follows.
    let us = if body.len() >= 42 + 7 && body[25] == 2 {
        let mut b = [0u8; 8];
        b[..7].copy_from_slice(&body[42..49]);
        let v = u64::from_le_bytes(b) & !(1u64 << 55);
        Some(v as i64)
    } else {
        None
    };
    let id = TxId::Mysql {
        uuid,
        tag: String::new(),
        gno,
    };
    Ok((id, us))
}

fn uuid_text(b: &[u8]) -> String {
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The statement of a query event (after its fixed part, status variables
/// and default database).
fn query_text(body: &[u8]) -> Option<&[u8]> {
    if body.len() < 13 {
        return None;
    }
    let db_len = body[8] as usize;
    let status_len = u16::from_le_bytes(body[11..13].try_into().unwrap()) as usize;
    let start = 13 + status_len + db_len + 1;
    body.get(start..)
}

fn is_begin(q: &[u8]) -> bool {
    q.eq_ignore_ascii_case(b"BEGIN") || q.eq_ignore_ascii_case(b"XA START")
}

fn is_end(q: &[u8]) -> bool {
    q.eq_ignore_ascii_case(b"COMMIT")
        || q.eq_ignore_ascii_case(b"ROLLBACK")
        || q.len() > 9 && q[..9].eq_ignore_ascii_case(b"XA COMMIT")
        || q.len() > 11 && q[..11].eq_ignore_ascii_case(b"XA ROLLBACK")
}

/// The first and last whole transactions of one binary log file, read
/// from `file` in windows of `window` bytes (larger only while one event
/// does not fit): a file may be a gigabyte, and no more than a window of
/// it is held at once.
pub fn ends(
    flavor: Flavor,
    file: &mut (impl std::io::Read + std::io::Seek),
    window: usize,
) -> Result<(Option<Tx>, Option<Tx>), String> {
    let (mut first, mut last) = (None, None);
    let (mut at, mut crc, mut open) = (0u64, None, None);
    let mut size = window;
    loop {
        file.seek(std::io::SeekFrom::Start(at))
            .map_err(|e| e.to_string())?;
        let mut data = Vec::with_capacity(size.min(1 << 24));
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::Read::by_ref(file), size as u64),
            &mut data,
        )
        .map_err(|e| e.to_string())?;
        let full = data.len() == size;
        let s = scan_from(flavor, &data, at, crc, open.clone()).map_err(|e| e.to_string())?;
        crc = s.checksum_len.or(crc);
        if first.is_none() {
            first = s.txs.first().cloned();
        }
        if let Some(t) = s.txs.last() {
            last = Some(t.clone());
        }
        let next = if s.boundary > at {
            s.boundary
        } else {
            s.event_boundary
        };
        if next == at {
            if full {
                // Not one whole event in the window: a larger one.
                size *= 2;
                continue;
            }
            return Ok((first, last));
        }
        open = if next == s.boundary {
            None
        } else {
            s.open.clone()
        };
        at = next;
        size = window;
    }
}

#[cfg(test)]
pub(crate) mod tests;
