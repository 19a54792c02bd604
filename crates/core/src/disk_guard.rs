//! Never die of a full disk: the primary refuses writes while any
//! instance's volume is nearly full, and takes them again once every
//! volume has room.
//!
//! Why refuse writes rather than switch over: the replicas hold the same
//! data and binary logs on volumes of the same size (and relay logs
//! besides), so a replica with room to spare is the exception, and a
//! switchover onto one buys minutes at the price of a switchover. A server
//! that reaches `ENOSPC` is worse than one that refuses writes: MySQL stops
//! itself when it cannot write its binary log (`binlog_error_action =
//! ABORT_SERVER`: a crash loop as each restart meets the same full disk),
//! MariaDB waits inside the commit, holding its locks, and a replica's
//! applier stops. So the guard acts while some room is left
//! ([`reserve`]), the server's commits in flight finish in it, and
//! clients get a plain read-only error at once instead of a hang.
//!
//! Two places apply the same rule: the control plane, which sees every
//! instance and records the reason in `status.writesRefused` (a replica's
//! volume fills first, holding relay logs too), and the primary's manager
//! for its own volumes, which does not wait for the control plane.

use cnmysql_api::VolumeUsage;

/// The room kept free: writes stop below it. It must outlast what a busy
/// writer adds while the guard is noticed (a poll, a status write, the
/// primary's next turn: a few seconds), on a replica that keeps relay logs
/// too, and a replica goes on writing what it still has to apply: measured
/// on the real node, a replica went 54 MB and 99 MB past the reserve at
/// 4 MiB/s of rows beside a busy writer.
pub const RESERVE_MIN_BYTES: u64 = 192 << 20;
/// ... or this share of the volume, if more (percent) ...
pub const RESERVE_PERCENT: u64 = 5;
/// ... but never more than this: a second's writes on the busiest server
/// are far less, and a large shared disk (the local platform's) keeps no
/// more free than this for the guard.
pub const RESERVE_MAX_BYTES: u64 = 1 << 30;

/// The bytes a volume keeps free: 5% of it, at least 192 MiB and at most
/// 1 GiB.
pub fn reserve(v: &VolumeUsage) -> u64 {
    (v.size_bytes / 100 * RESERVE_PERCENT).clamp(RESERVE_MIN_BYTES, RESERVE_MAX_BYTES)
}

/// Why `instance`'s volumes are too full for writes to go on, or None.
/// `refusing`: writes are refused already; they are taken again only once
/// every volume has twice the reserve, so the guard does not flap on the
/// edge.
pub fn short(instance: &str, volumes: &[VolumeUsage], refusing: bool) -> Option<String> {
    volumes.iter().find_map(|v| {
        let floor = if refusing {
            reserve(v).saturating_mul(2)
        } else {
            reserve(v)
        };
        (v.available_bytes < floor).then(|| {
            format!(
                "{instance}'s {} volume has {} left of {} (writes stop under {}): grow it (spec.storage.size, spec.storage.binlogs.size or autoGrow) or free space",
                v.volume,
                crate::status::human_bytes(v.available_bytes as f64),
                crate::status::human_bytes(v.size_bytes as f64),
                crate::status::human_bytes(reserve(v) as f64),
            )
        })
    })
}

/// The cluster's answer: why writes are refused (the first instance
/// short of room), or None. `refusing`: `status.writesRefused` is set.
pub fn writes_refused(s: &crate::status::Snapshot) -> Option<String> {
    let refusing = s.status.writes_refused.is_some();
    s.instances.iter().find_map(|o| {
        let st = o.status.as_ref()?;
        short(&o.name, &st.volumes, refusing)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(size_mib: u64, free_mib: u64) -> VolumeUsage {
        VolumeUsage {
            volume: "data".into(),
            size_bytes: size_mib << 20,
            used_bytes: (size_mib - free_mib) << 20,
            available_bytes: free_mib << 20,
        }
    }

    #[test]
    fn writes_stop_under_the_reserve_and_start_again_over_twice_it() {
        // 1 GiB: the 192 MiB floor; 10 GiB: 5%; 100 GiB: the 1 GiB cap.
        assert_eq!(reserve(&volume(1024, 0)), 192 << 20);
        assert_eq!(reserve(&volume(10_240, 0)), (10_240u64 << 20) / 100 * 5);
        assert_eq!(reserve(&volume(102_400, 0)), 1 << 30);
        assert!(short("db-1", &[volume(1024, 193)], false).is_none());
        let why = short("db-1", &[volume(1024, 127)], false).unwrap();
        assert!(
            why.starts_with(
                "db-1's data volume has 133 MB left of 1.07 GB (writes stop under 201 MB)"
            ),
            "{why}"
        );
        // Refusing: not taken again until 384 MiB are free.
        assert!(short("db-1", &[volume(1024, 300)], true).is_some());
        assert!(short("db-1", &[volume(1024, 385)], true).is_none());
    }

    #[test]
    fn any_instance_short_of_room_refuses_the_cluster_s_writes() {
        let mut s = crate::testutil::snapshot(vec![
            crate::testutil::primary("db-1", "0-1-5"),
            crate::testutil::replica("db-2", "0-1-5"),
        ]);
        s.instances[0].status.as_mut().unwrap().volumes = vec![volume(1024, 500)];
        assert_eq!(writes_refused(&s), None);
        s.instances[1].status.as_mut().unwrap().volumes = vec![volume(1024, 100)];
        let why = writes_refused(&s).unwrap();
        assert!(why.starts_with("db-2's data volume"), "{why}");
    }
}
