use super::*;
use cnmysql_api::InstanceState;
use cnmysql_api::backup::{ArchiveStatus, BackupSpec, BackupStatus};

const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
const HOUR_MS: i64 = 3_600_000;
const NOW: i64 = 100 * HOUR_MS;

fn mysql(set: &str) -> History {
    parse_history(Flavor::Mysql, set).unwrap()
}

fn mariadb(state: &str) -> History {
    parse_history(Flavor::Mariadb, state).unwrap()
}

/// Files ending at transactions 10, 20, 30 and the one being written,
/// each written `age_h` hours ago.
fn files(age_h: i64) -> Vec<BinlogFile> {
    let mut v: Vec<BinlogFile> = [10, 20, 30]
        .iter()
        .enumerate()
        .map(|(i, end)| BinlogFile {
            name: format!("mysql-bin.00000{}", i + 1),
            bytes: 100,
            ends: Some(mysql(&format!("{U}:1-{end}"))),
            written_ms: NOW - age_h * HOUR_MS,
        })
        .collect();
    v.push(BinlogFile {
        name: "mysql-bin.000004".into(),
        bytes: 50,
        ends: None,
        written_ms: NOW,
    });
    v
}

fn need(who: &str, upto: u64, hard: bool) -> Need {
    Need {
        who: who.into(),
        history: Some(mysql(&format!("{U}:1-{upto}"))),
        hard,
    }
}

const RELAXED: Policy = Policy {
    retention_ms: 0,
    pressure: false,
};

#[test]
fn files_every_reader_holds_go_and_the_first_one_missing_stops_the_purge() {
    let d = decide(&files(1), &[need("replica c-2", 25, true)], RELAXED, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000003"));
    assert_eq!((d.files, d.bytes), (2, 200));
    assert_eq!(d.kept_for, "replica c-2 lacks transactions in it");
}

#[test]
fn the_file_being_written_is_always_kept() {
    let d = decide(&files(1), &[need("replica c-2", 99, true)], RELAXED, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000004"));
    assert_eq!(d.kept_for, "the file being written");
    let one = &files(1)[3..];
    let d = decide(one, &[], RELAXED, NOW);
    assert_eq!(d.purge_to, None);
    assert_eq!(d.kept_for, "the file being written");
}

#[test]
fn the_slowest_reader_decides_and_the_archive_is_one() {
    let needs = [
        need("replica c-2", 99, true),
        need("the binlog archive", 12, true),
        need("replica c-3", 25, true),
    ];
    let d = decide(&files(1), &needs, RELAXED, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000002"));
    assert_eq!(d.kept_for, "the binlog archive lacks transactions in it");
}

#[test]
fn a_reader_whose_history_is_unknown_keeps_everything() {
    let needs = [Need {
        who: "the binlog archive".into(),
        history: None,
        hard: true,
    }];
    let d = decide(&files(1), &needs, RELAXED, NOW);
    assert_eq!(d.purge_to, None);
    assert!(d.kept_for.contains("not known"), "{d:?}");
}

#[test]
fn a_file_not_read_yet_is_kept() {
    let mut f = files(1);
    f[1].ends = None;
    let d = decide(&f, &[], RELAXED, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000002"));
    assert!(d.kept_for.contains("not read yet"));
}

#[test]
fn retention_keeps_young_files_until_the_volume_is_short() {
    let week = Policy {
        retention_ms: 7 * 24 * HOUR_MS,
        pressure: false,
    };
    let d = decide(&files(24), &[], week, NOW);
    assert_eq!(d.purge_to, None);
    assert!(d.kept_for.contains("binlogRetentionSeconds"), "{d:?}");
    // Older than the retention time: they go.
    let d = decide(&files(8 * 24), &[], week, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000004"));
    // Under pressure the retention time no longer keeps them.
    let d = decide(
        &files(24),
        &[],
        Policy {
            pressure: true,
            ..week
        },
        NOW,
    );
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000004"));
}

#[test]
fn under_pressure_an_absent_replica_stops_keeping_files_but_the_archive_and_running_ones_do_not() {
    let absent = need("replica c-3", 5, false);
    let short = Policy {
        retention_ms: 0,
        pressure: true,
    };
    assert_eq!(
        decide(&files(1), std::slice::from_ref(&absent), RELAXED, NOW).purge_to,
        None
    );
    let d = decide(&files(1), std::slice::from_ref(&absent), short, NOW);
    assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000004"));
    for hard in [
        need("replica c-2", 15, true),
        need("the binlog archive", 15, true),
    ] {
        let d = decide(&files(1), &[absent.clone(), hard.clone()], short, NOW);
        assert_eq!(d.purge_to.as_deref(), Some("mysql-bin.000002"), "{hard:?}");
    }
}

#[test]
fn mariadb_files_are_compared_by_the_last_gtid_of_each_domain() {
    // The file ends with server 1's 0-1-100, the domain's last.
    let ends = parse_file_end(Flavor::Mariadb, "[0-1-100,0-2-40]").unwrap();
    let file = |ends: History| BinlogFile {
        name: "mysql-bin.000001".into(),
        bytes: 1,
        ends: Some(ends),
        written_ms: 0,
    };
    let writing = BinlogFile {
        name: "mysql-bin.000002".into(),
        bytes: 1,
        ends: None,
        written_ms: NOW,
    };
    let with = |state: &str| Need {
        who: "replica c-2".into(),
        history: Some(mariadb(state)),
        hard: true,
    };
    let fs = [file(ends.clone()), writing.clone()];
    let purged = |state: &str| decide(&fs, &[with(state)], RELAXED, NOW).purge_to;
    // A replica of server 1, since gone on to server 3's writes.
    assert_eq!(
        purged("0-1-100,0-3-101").as_deref(),
        Some("mysql-bin.000002")
    );
    assert_eq!(purged("0-1-120").as_deref(), Some("mysql-bin.000002"));
    assert_eq!(purged("0-1-99"), None);
    // Past 100 only in another server's numbers (a diverged former
    // primary's history): not shown to hold 0-1-100.
    assert_eq!(purged("0-3-5000"), None);
    // A domain the reader never saw: it lacks it.
    let two = parse_file_end(Flavor::Mariadb, "[0-1-100,1-1-3]").unwrap();
    let fs = [file(two), writing];
    assert_eq!(decide(&fs, &[with("0-1-100")], RELAXED, NOW).purge_to, None);
}

#[test]
fn file_ends_are_read_as_the_servers_print_them() {
    assert_eq!(
        parse_file_end(Flavor::Mysql, &format!("{U}:1-10,\n{U}:12")),
        Some(mysql(&format!("{U}:1-10:12")))
    );
    assert_eq!(parse_file_end(Flavor::Mysql, ""), Some(mysql("")));
    assert_eq!(parse_file_end(Flavor::Mariadb, "[]"), Some(mariadb("")));
    assert_eq!(parse_file_end(Flavor::Mariadb, "[0-1-x]"), None);
}

fn spec(instances: i32, archive: bool) -> ClusterSpec {
    let mut s: ClusterSpec = serde_json::from_value(serde_json::json!({
        "instances": instances, "mysql": {"flavor": "mysql"}
    }))
    .unwrap();
    if archive {
        s.backup = Some(BackupSpec {
            archive_binlogs: true,
            ..Default::default()
        });
    }
    s
}

#[test]
fn the_readers_are_the_other_members_and_the_archive() {
    let mut st = ClusterStatus::default();
    for (name, gtid) in [
        ("c-1", "1-30"),
        ("c-2", "1-20"),
        ("c-3", "1-5"),
        ("c-4", "1-1"),
    ] {
        st.gtid_executed_by_instance
            .insert(name.into(), format!("{U}:{gtid}"));
    }
    st.instance_states.insert(
        "c-2".into(),
        InstanceState {
            role: "replica".into(),
            ..Default::default()
        },
    );
    st.instance_states.insert(
        "c-3".into(),
        InstanceState {
            role: "unreachable".into(),
            ..Default::default()
        },
    );
    let n = needs(&spec(3, false), "c", &st, "c-1");
    let who: Vec<(&str, bool)> = n.iter().map(|n| (n.who.as_str(), n.hard)).collect();
    // c-4 is no member (scaled down); c-3 does not report.
    assert_eq!(who, [("replica c-2", true), ("replica c-3", false)]);
    // A replica's own files are read by the primary too.
    st.current_primary = Some("c-1".into());
    let n = needs(&spec(3, false), "c", &st, "c-2");
    let who: Vec<&str> = n.iter().map(|n| n.who.as_str()).collect();
    assert_eq!(who, ["primary c-1", "replica c-3"]);
    // A diverged instance re-clones: it reads nothing.
    st.diverged_instances.push("c-3".into());
    assert_eq!(needs(&spec(3, false), "c", &st, "c-1").len(), 1);
    // The archive, unknown until its run caught up, then what it holds.
    let n = needs(&spec(3, true), "c", &st, "c-1");
    assert_eq!(n[1].who, "the binlog archive");
    assert_eq!(n[1].history, None);
    st.backup = Some(BackupStatus {
        archive: Some(ArchiveStatus {
            held: format!("{U}:1-12"),
            ..Default::default()
        }),
        ..Default::default()
    });
    let n = needs(&spec(3, true), "c", &st, "c-1");
    assert_eq!(n[1].history, Some(mysql(&format!("{U}:1-12"))));
}

#[test]
fn the_volume_holding_the_files_decides_the_pressure() {
    let vol = |name: &str, used: u64| VolumeUsage {
        volume: name.into(),
        size_bytes: 100,
        used_bytes: used,
        available_bytes: 100 - used,
    };
    let st = ClusterStatus::default();
    assert!(!pressure(&[vol("data", 69)], false, false, &st));
    assert!(pressure(&[vol("data", 70)], false, false, &st));
    assert!(!pressure(
        &[vol("data", 90), vol("binlogs", 10)],
        false,
        false,
        &st
    ));
    assert!(pressure(
        &[vol("data", 10), vol("binlogs", 80)],
        false,
        false,
        &st
    ));
    assert!(pressure(&[], false, true, &st));
    // A replica at 69% whose volume has writes refused (the disk guard
    // lets go only with room to spare): its retained files must go, or
    // writes never come back (the real node's binlog-volume test, once).
    let refused = ClusterStatus {
        writes_refused: Some("db-2's binlogs volume has 229 MB left".into()),
        ..Default::default()
    };
    assert!(pressure(&[vol("binlogs", 69)], false, false, &refused));
}

/// Local mode's directories share the host's disk: 80% of it used by other
/// things keeps a replica's files; only too little left does not (CI,
/// once: a frozen replica's files purged on a host disk 70% full).
#[test]
fn a_shared_host_disk_is_short_by_what_is_left_not_by_its_share_used() {
    const GIB: u64 = 1 << 30;
    let host = |used_gib: u64, free_gib: u64| VolumeUsage {
        volume: "data".into(),
        size_bytes: (used_gib + free_gib) * GIB,
        used_bytes: used_gib * GIB,
        available_bytes: free_gib * GIB,
    };
    let st = ClusterStatus::default();
    assert!(pressure(&[host(80, 20)], false, false, &st));
    assert!(!pressure(&[host(80, 20)], true, false, &st));
    assert!(!pressure(&[host(400, 5)], true, false, &st));
    assert!(pressure(&[host(400, 3)], true, false, &st));
}
