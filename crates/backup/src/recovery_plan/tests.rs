//! Plans over hand-made archives: one primary, a switchover (runs overlap),
//! a failover that lost unacknowledged transactions (orphans), missing
//! pieces, and each kind of target, on both flavours.

use super::*;
use crate::archive::sha256;

const SEC: i64 = 1_000_000;

fn mariadb(s: &str) -> TxId {
    s.parse().unwrap()
}

/// A piece of `file` holding `txs` (ids with their commit second), each
/// transaction 100 bytes, the piece starting where `at` says.
fn piece(file: &str, at: &mut u64, txs: &[(&str, i64)], rotated: Option<&str>) -> PieceIndex {
    let start = *at;
    let mut pos = if start == 0 { 120 } else { start };
    let mut out = Vec::new();
    for (id, sec) in txs {
        out.push(Tx {
            id: id.parse().unwrap(),
            start: pos,
            end: pos + 100,
            commit_us: sec * SEC,
        });
        pos += 100;
    }
    *at = pos;
    PieceIndex {
        file: file.into(),
        start,
        end: pos,
        sha256: sha256(b""),
        header_end: (start == 0).then_some(120),
        txs: out,
        rotated_to: rotated.map(str::to_string),
        stopped: false,
    }
}

fn run(
    flavor: Flavor,
    name: &str,
    first: &str,
    start: &str,
    pieces: Vec<PieceIndex>,
) -> RunArchive {
    RunArchive {
        run: Run {
            run: name.into(),
            instance: "db".into(),
            flavor,
            server: "1".into(),
            started_at: jiff::Timestamp::UNIX_EPOCH,
            first_file: first.into(),
            start_position: start.into(),
            start_state: String::new(),
        },
        pieces,
        head: None,
    }
}

fn head(file: &str, offset: u64, complete_sec: i64) -> Option<Head> {
    Some(Head {
        file: file.into(),
        offset,
        last: None,
        last_commit_us: 0,
        complete_until_us: complete_sec * SEC,
        ended: false,
        state: String::new(),
    })
}

/// One primary: 0-1-1..6 in two files, the base at 0-1-2.
fn one_primary() -> Vec<RunArchive> {
    let mut a = 0;
    let p1 = piece("b.000001", &mut a, &[("0-1-1", 10), ("0-1-2", 11)], None);
    let p2 = piece("b.000001", &mut a, &[("0-1-3", 12)], Some("b.000002"));
    let mut b = 0;
    let p3 = piece(
        "b.000002",
        &mut b,
        &[("0-1-4", 13), ("0-1-5", 14), ("0-1-6", 15)],
        None,
    );
    let mut r = run(Flavor::Mariadb, "r1", "b.000001", "", vec![p3, p1, p2]);
    r.head = head("b.000002", b, 20);
    vec![r]
}

#[test]
fn latest_replays_what_the_base_lacks_once_in_merged_ranges() {
    let p = plan(Flavor::Mariadb, "0-1-2", &one_primary(), &Target::Latest).unwrap();
    assert_eq!(p.applied, 4);
    assert_eq!(p.position, "0-1-6");
    assert_eq!(p.last, Some(mariadb("0-1-6")));
    assert_eq!(
        p.replays,
        vec![
            Replay {
                run: "r1".into(),
                file: "b.000001".into(),
                header_end: 120,
                ranges: vec![(320, 420)]
            },
            Replay {
                run: "r1".into(),
                file: "b.000002".into(),
                header_end: 120,
                ranges: vec![(120, 420)]
            }
        ]
    );
}

#[test]
fn a_time_target_stops_at_the_last_commit_at_or_before_it() {
    let p = plan(
        Flavor::Mariadb,
        "0-1-2",
        &one_primary(),
        &Target::Time(13 * SEC),
    )
    .unwrap();
    assert_eq!(p.last, Some(mariadb("0-1-4")));
    assert_eq!(p.last_commit_us, Some(13 * SEC));
    // Past the last transaction, but the head proves nothing came before 20.
    let p = plan(
        Flavor::Mariadb,
        "0-1-2",
        &one_primary(),
        &Target::Time(19 * SEC),
    )
    .unwrap();
    assert_eq!(p.position, "0-1-6");
    // Beyond what the archive is known to hold: refused.
    let e = plan(
        Flavor::Mariadb,
        "0-1-2",
        &one_primary(),
        &Target::Time(21 * SEC),
    )
    .unwrap_err();
    assert!(
        e.contains("complete only up to 1970-01-01T00:00:20Z"),
        "{e}"
    );
}

#[test]
fn a_gtid_target_stops_once_held_and_one_beyond_the_archive_is_refused() {
    let p = plan(
        Flavor::Mariadb,
        "0-1-2",
        &one_primary(),
        &Target::Gtid("0-1-5".into()),
    )
    .unwrap();
    assert_eq!(p.position, "0-1-5");
    let e = plan(
        Flavor::Mariadb,
        "0-1-2",
        &one_primary(),
        &Target::Gtid("0-1-9".into()),
    )
    .unwrap_err();
    assert!(
        e.contains("not in the binlog archive: it reaches 0-1-6"),
        "{e}"
    );
    let p = plan(Flavor::Mariadb, "0-1-2", &one_primary(), &Target::BaseOnly).unwrap();
    assert_eq!((p.applied, p.replays.len()), (0, 0));
}

#[test]
fn a_missing_piece_or_file_or_tail_is_a_named_gap() {
    // The end of a file gone: the transactions no longer follow.
    let mut runs = one_primary();
    runs[0]
        .pieces
        .retain(|p| !(p.file == "b.000001" && p.start > 0));
    let e = plan(Flavor::Mariadb, "0-1-2", &runs, &Target::Latest).unwrap_err();
    assert!(
        e.contains("after 0-1-2 the next transaction archived is 0-1-4"),
        "{e}"
    );

    // The last file gone: the head says it was archived.
    let mut runs = one_primary();
    runs[0].pieces.retain(|p| p.file != "b.000002");
    let e = plan(Flavor::Mariadb, "0-1-2", &runs, &Target::Latest).unwrap_err();
    assert!(
        e.contains("b.000002 up to 420 as archived: pieces are missing"),
        "{e}"
    );

    // A piece gone from the middle of a file: its bytes are named, even
    // when the transactions around it would seem to follow.
    let mut a = 0;
    let p1 = piece("b.000001", &mut a, &[("0-1-1", 1)], None);
    let _lost = piece("b.000001", &mut a, &[], None);
    a += 50;
    let p3 = piece("b.000001", &mut a, &[("0-1-2", 2)], None);
    let runs3 = vec![run(Flavor::Mariadb, "r1", "b.000001", "", vec![p1, p3])];
    let e = plan(Flavor::Mariadb, "0-1-0", &runs3, &Target::Latest).unwrap_err();
    assert!(e.contains("bytes 220-270 of b.000001 are missing"), "{e}");
    // A target before the gap is still reached.
    let p = plan(
        Flavor::Mariadb,
        "0-1-0",
        &runs3,
        &Target::Gtid("0-1-1".into()),
    )
    .unwrap();
    assert_eq!(p.position, "0-1-1");
}

#[test]
fn a_switchover_overlaps_and_each_transaction_is_applied_once() {
    let mut a = 0;
    let r1 = run(
        Flavor::Mariadb,
        "r1",
        "b.000001",
        "",
        vec![piece(
            "b.000001",
            &mut a,
            &[("0-1-1", 1), ("0-1-2", 2), ("0-1-3", 3)],
            None,
        )],
    );
    // The new primary archives its current file from its start: it holds
    // 0-1-2 and 0-1-3 (replicated), then its own writes.
    let mut b = 0;
    let r2 = run(
        Flavor::Mariadb,
        "r2",
        "c.000004",
        "0-1-3",
        vec![piece(
            "c.000004",
            &mut b,
            &[("0-1-2", 2), ("0-1-3", 3), ("0-2-4", 4), ("0-2-5", 5)],
            None,
        )],
    );
    let p = plan(Flavor::Mariadb, "0-1-1", &[r2, r1], &Target::Latest).unwrap();
    assert_eq!(p.applied, 4);
    assert_eq!(p.orphaned, 0);
    assert_eq!(p.position, "0-2-5");
    assert_eq!(p.replays.len(), 2);
    assert_eq!(p.replays[0].ranges, vec![(220, 420)]);
    assert_eq!(p.replays[1].ranges, vec![(320, 520)]);
}

#[test]
fn transactions_a_failover_lost_are_orphaned_not_replayed() {
    // 0-1-3 and 0-1-4 reached the archive but not the replica promoted at
    // 0-1-2, which went on with 0-2-3 (the same sequence number) and 0-2-4.
    let mut a = 0;
    let r1 = run(
        Flavor::Mariadb,
        "r1",
        "b.000001",
        "",
        vec![piece(
            "b.000001",
            &mut a,
            &[("0-1-1", 1), ("0-1-2", 2), ("0-1-3", 3), ("0-1-4", 4)],
            None,
        )],
    );
    let mut b = 0;
    let r2 = run(
        Flavor::Mariadb,
        "r2",
        "c.000001",
        // It began late, after its own writes: only the retaken sequence
        // numbers show 0-1-3 and 0-1-4 were lost.
        "0-2-4",
        vec![piece(
            "c.000001",
            &mut b,
            &[("0-1-2", 2), ("0-2-3", 5), ("0-2-4", 6)],
            None,
        )],
    );
    let p = plan(Flavor::Mariadb, "0-1-0", &[r1.clone(), r2], &Target::Latest).unwrap();
    assert_eq!(p.orphaned, 2);
    assert_eq!(p.position, "0-2-4");
    assert_eq!(p.applied, 4);
    // Nothing came after the failover yet: the start position shows it.
    let r2 = run(Flavor::Mariadb, "r2", "c.000001", "0-1-2", vec![]);
    let p = plan(Flavor::Mariadb, "0-1-0", &[r1, r2], &Target::Latest).unwrap();
    assert_eq!((p.orphaned, p.position.as_str()), (2, "0-1-2"));
}

const U1: &str = "11111111-1111-1111-1111-111111111111";
const U2: &str = "22222222-2222-2222-2222-222222222222";

#[test]
fn mysql_gaps_and_orphans_follow_the_gtid_sets() {
    let ids = |u: &str, r: std::ops::RangeInclusive<u64>| -> Vec<(String, i64)> {
        r.map(|n| (format!("{u}:{n}"), n as i64)).collect()
    };
    fn refs(v: &[(String, i64)]) -> Vec<(&str, i64)> {
        v.iter().map(|(s, t)| (s.as_str(), *t)).collect()
    }
    let mut a = 0;
    let first = ids(U1, 1..=5);
    let r1 = run(
        Flavor::Mysql,
        "r1",
        "b.000001",
        "",
        vec![piece("b.000001", &mut a, &refs(&first), None)],
    );
    // Promoted holding U1:1-4; U1:5 was lost.
    let mut b = 0;
    let second = ids(U2, 1..=2);
    let r2 = run(
        Flavor::Mysql,
        "r2",
        "c.000001",
        &format!("{U1}:1-4"),
        vec![piece("c.000001", &mut b, &refs(&second), None)],
    );
    let p = plan(
        Flavor::Mysql,
        &format!("{U1}:1-2"),
        &[r1.clone(), r2],
        &Target::Latest,
    )
    .unwrap();
    assert_eq!(p.orphaned, 1);
    assert_eq!(p.position, format!("{U1}:1-4,{U2}:1-2"));

    // A base that does not reach the archive's first transaction: a gap.
    let mut c = 0;
    let late = ids(U1, 4..=5);
    let r = run(
        Flavor::Mysql,
        "r1",
        "b.000001",
        "",
        vec![piece("b.000001", &mut c, &refs(&late), None)],
    );
    let e = plan(Flavor::Mysql, &format!("{U1}:1-2"), &[r], &Target::Latest).unwrap_err();
    assert!(
        e.contains(&format!("{U1}:4 is archived but {U1}:3 is not")),
        "{e}"
    );
}

#[test]
fn overlapping_pieces_from_a_retried_store_are_read_once() {
    // A piece stored after its request timed out, and the longer one the
    // archiver stored next from the same offset.
    let mut a = 0;
    let p1 = piece("b.000001", &mut a, &[("0-1-1", 1)], None);
    let mut short_end = a;
    let p2 = piece("b.000001", &mut short_end, &[("0-1-2", 2)], None);
    let mut long_end = a;
    let p3 = piece(
        "b.000001",
        &mut long_end,
        &[("0-1-2", 2), ("0-1-3", 3)],
        None,
    );
    let runs = vec![run(Flavor::Mariadb, "r1", "b.000001", "", vec![p3, p1, p2])];
    let p = plan(Flavor::Mariadb, "0-1-0", &runs, &Target::Latest).unwrap();
    assert_eq!((p.applied, p.position.as_str()), (3, "0-1-3"));
    assert_eq!(p.replays[0].ranges, vec![(120, 420)]);
}
