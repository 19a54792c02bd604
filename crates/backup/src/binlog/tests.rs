//! The reader against hand-built events of both flavours, cut at every
//! byte: whatever is incomplete is left for the next read, never guessed.

use super::*;

fn event(kind: u8, server: u32, when: u32, body: &[u8]) -> Vec<u8> {
    let size = (HEADER + body.len() + 4) as u32;
    let mut e = Vec::new();
    e.extend_from_slice(&when.to_le_bytes());
    e.push(kind);
    e.extend_from_slice(&server.to_le_bytes());
    e.extend_from_slice(&size.to_le_bytes());
    e.extend_from_slice(&0u32.to_le_bytes());
    e.extend_from_slice(&0u16.to_le_bytes());
    e.extend_from_slice(body);
    e.extend_from_slice(&[0xaa; 4]);
    e
}

fn fde() -> Vec<u8> {
    let mut body = vec![4, 0];
    body.extend_from_slice(&[0u8; 50]);
    body.extend_from_slice(&[0u8; 4]);
    body.push(19);
    body.extend_from_slice(&[0u8; 10]);
    body.push(1); // CRC32
    event(FORMAT_DESCRIPTION, 1, 100, &body)
}

fn query(when: u32, q: &str) -> Vec<u8> {
    let mut body = vec![0u8; 8];
    body.push(4); // db length
    body.extend_from_slice(&[0, 0]);
    body.extend_from_slice(&2u16.to_le_bytes());
    body.extend_from_slice(&[9, 9]); // status variables
    body.extend_from_slice(b"test\0");
    body.extend_from_slice(q.as_bytes());
    event(QUERY, 1, when, &body)
}

fn mariadb_gtid(server: u32, when: u32, domain: u32, seq: u64, standalone: bool) -> Vec<u8> {
    let mut body = seq.to_le_bytes().to_vec();
    body.extend_from_slice(&domain.to_le_bytes());
    body.push(if standalone { MARIADB_FL_STANDALONE } else { 0 });
    event(MARIADB_GTID, server, when, &body)
}

fn mysql_gtid_event(when: u32, gno: u64, commit_us: u64) -> Vec<u8> {
    let mut body = vec![1u8];
    body.extend_from_slice(&[0x11; 16]);
    body.extend_from_slice(&gno.to_le_bytes());
    body.push(2);
    body.extend_from_slice(&[0u8; 16]);
    body.extend_from_slice(&commit_us.to_le_bytes()[..7]);
    event(MYSQL_GTID, 7, when, &body)
}

fn rotate(next: &str) -> Vec<u8> {
    let mut body = 4u64.to_le_bytes().to_vec();
    body.extend_from_slice(next.as_bytes());
    event(ROTATE, 1, 0, &body)
}

pub(crate) fn mariadb_file() -> Vec<u8> {
    let mut f = MAGIC.to_vec();
    f.extend(fde());
    // A DDL statement, then a two-row transaction ended by an XID, then
    // one ended by COMMIT, then the rotation.
    f.extend(mariadb_gtid(1, 200, 0, 1, true));
    f.extend(query(200, "CREATE TABLE t (a INT)"));
    f.extend(mariadb_gtid(1, 201, 0, 2, false));
    f.extend(event(19, 1, 201, &[1, 2, 3])); // table map
    f.extend(event(30, 1, 201, &[4, 5, 6])); // rows
    f.extend(event(XID, 1, 203, &[0; 8]));
    f.extend(mariadb_gtid(2, 204, 0, 3, false));
    f.extend(query(204, "INSERT INTO t VALUES (1)"));
    f.extend(query(205, "COMMIT"));
    f.extend(rotate("mysql-bin.000002"));
    f
}

#[test]
fn mariadb_transactions_their_places_and_times() {
    let f = mariadb_file();
    let s = scan(Flavor::Mariadb, &f, 0, None).unwrap();
    let ids: Vec<String> = s.txs.iter().map(|t| t.id.to_string()).collect();
    assert_eq!(ids, ["0-1-1", "0-1-2", "0-2-3"]);
    assert_eq!(s.checksum_len, Some(4));
    assert_eq!(s.header_end, Some(4 + fde().len() as u64));
    assert_eq!(s.txs[0].start, s.header_end.unwrap());
    assert_eq!(s.txs[1].start, s.txs[0].end);
    // The time is the last event's (the XID's), not the GTID event's.
    assert_eq!(s.txs[1].commit_us, 203_000_000);
    assert_eq!(s.txs[2].commit_us, 205_000_000);
    assert_eq!(s.rotated_to.as_deref(), Some("mysql-bin.000002"));
    assert!(s.closed());
    assert_eq!(s.boundary, f.len() as u64);
}

#[test]
fn a_read_cut_anywhere_keeps_only_whole_transactions_and_resumes() {
    let f = mariadb_file();
    let whole = scan(Flavor::Mariadb, &f, 0, None).unwrap();
    for cut in 0..f.len() {
        let first = scan(Flavor::Mariadb, &f[..cut], 0, None).unwrap();
        // Every transaction found is whole and ends at or before the cut.
        assert!(first.txs.iter().all(|t| t.end <= cut as u64));
        assert!(first.boundary <= cut as u64);
        assert_eq!(first.txs[..], whole.txs[..first.txs.len()]);
        if first.checksum_len.is_none() {
            assert!(first.txs.is_empty());
            continue;
        }
        let b = first.boundary as usize;
        let rest = scan(Flavor::Mariadb, &f[b..], b as u64, first.checksum_len).unwrap();
        let mut all = first.txs.clone();
        all.extend(rest.txs);
        assert_eq!(all, whole.txs, "cut at {cut}");
        assert_eq!(rest.boundary, f.len() as u64);
    }
}

#[test]
fn mysql_transactions_carry_the_microsecond_commit_time() {
    let mut f = MAGIC.to_vec();
    f.extend(fde());
    f.extend(event(35, 7, 100, &[0; 8])); // previous GTIDs
    f.extend(mysql_gtid_event(300, 1, 1_700_000_000_123_456));
    f.extend(query(300, "CREATE TABLE t (a INT)"));
    f.extend(mysql_gtid_event(301, 2, 1_700_000_001_000_001));
    f.extend(query(301, "BEGIN"));
    f.extend(event(19, 7, 301, &[1]));
    f.extend(event(30, 7, 301, &[2]));
    f.extend(event(XID, 7, 301, &[0; 8]));
    // The third is still being written: its XID is missing.
    f.extend(mysql_gtid_event(302, 3, 1_700_000_002_000_000));
    f.extend(query(302, "BEGIN"));
    let s = scan(Flavor::Mysql, &f, 0, None).unwrap();
    let ids: Vec<String> = s.txs.iter().map(|t| t.id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "11111111-1111-1111-1111-111111111111:1",
            "11111111-1111-1111-1111-111111111111:2"
        ]
    );
    assert_eq!(s.txs[0].commit_us, 1_700_000_000_123_456);
    assert_eq!(s.txs[1].commit_us, 1_700_000_001_000_001);
    assert_eq!(s.boundary, s.txs[1].end);
    assert!(!s.closed());
}

#[test]
fn garbage_is_refused_with_its_offset() {
    let e = scan(Flavor::Mariadb, b"\xfebix", 0, None).unwrap_err();
    assert!(e.to_string().contains("offset 0"), "{e}");
    let mut f = MAGIC.to_vec();
    f.extend(fde());
    let at = f.len();
    f.extend(event(QUERY, 1, 1, &[]).iter().take(9));
    f.extend(3u32.to_le_bytes());
    f.extend([0u8; 6]);
    let e = scan(Flavor::Mariadb, &f, 0, None).unwrap_err();
    assert_eq!(e.offset, at as u64, "{e}");
}

#[test]
fn transaction_ids_read_back_as_written() {
    for s in ["0-1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"] {
        let id: TxId = s.parse().unwrap();
        assert_eq!(id.to_string(), s);
        let j = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<TxId>(&j).unwrap(), id);
    }
    assert!("nonsense".parse::<TxId>().is_err());
}

#[test]
fn a_transaction_larger_than_a_read_is_carried_across_reads() {
    let f = mariadb_file();
    let whole = scan(Flavor::Mariadb, &f, 0, None).unwrap();
    // Read in windows cut at event boundaries, carrying what is open, as
    // the archiver does when one transaction outgrows a piece.
    // A window holds at least the largest event (the archiver reads more
    // when one does not fit).
    for window in 160..f.len() {
        let mut at = 0u64;
        let mut open = None;
        let mut crc = None;
        let mut txs = Vec::new();
        while (at as usize) < f.len() {
            let end = (at as usize + window).min(f.len());
            let s =
                scan_from(Flavor::Mariadb, &f[at as usize..end], at, crc, open.clone()).unwrap();
            crc = s.checksum_len.or(crc);
            txs.extend(s.txs.clone());
            let next = if s.boundary > at {
                s.boundary
            } else {
                s.event_boundary
            };
            open = if next == s.boundary {
                None
            } else {
                s.open.clone()
            };
            if next == at {
                break;
            }
            at = next;
        }
        assert_eq!(txs, whole.txs, "window {window}");
    }
}

#[test]
fn a_file_s_first_and_last_transactions_are_found_window_by_window() {
    for (flavor, f) in [(Flavor::Mariadb, mariadb_file())] {
        let whole = scan(flavor, &f, 0, None).unwrap();
        let want = (whole.txs.first().cloned(), whole.txs.last().cloned());
        assert!(want.0.is_some() && want.0 != want.1);
        for window in [1, 7, 19, 64, 160, f.len(), 1 << 20] {
            let got = ends(flavor, &mut std::io::Cursor::new(&f), window).unwrap();
            assert_eq!(got, want, "window {window}");
        }
    }
    let empty = ends(Flavor::Mysql, &mut std::io::Cursor::new(MAGIC.to_vec()), 64).unwrap();
    assert_eq!(empty, (None, None));
}
