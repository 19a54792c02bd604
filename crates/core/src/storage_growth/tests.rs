use super::*;

const GI: u128 = 1 << 30;

fn claim(name: &str, gi: u128, capacity: Option<u128>) -> ClaimView {
    ClaimView {
        name: name.into(),
        instance: name.trim_end_matches("-binlog").into(),
        requested: (format!("{gi}Gi"), gi * GI),
        capacity: capacity.map(|c| c * GI),
        class: Some("fast".into()),
        file_system_pending: false,
    }
}

fn classes(allow: bool) -> BTreeMap<String, bool> {
    BTreeMap::from([("fast".to_string(), allow)])
}

const F: &str = "spec.storage.size";

fn asked<'a>(
    want: &'a str,
    claims: &'a [ClaimView],
    usage: &'a BTreeMap<String, VolumeUsage>,
) -> VolumeClaims<'a> {
    VolumeClaims {
        volume: "data",
        field: F,
        want,
        claims,
        auto_grow: None,
        usage,
        last_step_ms: None,
        now_ms: 1_000_000,
        writes_refused: false,
    }
}

/// `percent` full of a file system the size of `gi` GiB (95% of it, as
/// ext4 leaves).
fn used(gi: u128, percent: u64) -> VolumeUsage {
    let size = (gi * GI * 95 / 100) as u64;
    VolumeUsage {
        volume: "data".into(),
        size_bytes: size,
        used_bytes: size / 100 * percent,
        available_bytes: size / 100 * (100 - percent),
    }
}

fn policy(increment: &str, maximum: &str) -> AutoGrowSpec {
    AutoGrowSpec {
        used_percent: 80,
        increment: increment.into(),
        maximum: maximum.into(),
    }
}

/// The decision with the policy `p` on 1Gi claims, db-1 the primary;
/// `expandable`: the class allows expansion.
fn with_policy(
    p: &AutoGrowSpec,
    claims: &[ClaimView],
    usage: &BTreeMap<String, VolumeUsage>,
    expandable: bool,
) -> Growth {
    plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", p)),
            ..asked("1Gi", claims, usage)
        },
        &classes(expandable),
        Some("db-1"),
    )
}

fn three(a: u128, b: u128, c: u128) -> Vec<ClaimView> {
    vec![
        claim("db-1", a, Some(a)),
        claim("db-2", b, Some(b)),
        claim("db-3", c, Some(c)),
    ]
}

#[test]
fn claims_grow_one_at_a_time_replicas_first_then_the_primary() {
    let none = BTreeMap::new();
    let next =
        |claims: &[ClaimView]| plan(&asked("2Gi", claims, &none), &classes(true), Some("db-1"));
    let expand = |c: &str| Growth::Expand {
        claim: c.into(),
        to: "2Gi".into(),
        why: "spec.storage.size asks for 2Gi".into(),
    };
    assert_eq!(next(&three(1, 1, 1)), expand("db-2"));
    assert_eq!(next(&three(1, 2, 1)), expand("db-3"));
    assert_eq!(next(&three(1, 2, 2)), expand("db-1"));
    assert_eq!(next(&three(2, 2, 2)), Growth::Nothing);
    // Asked, not yet grown: the next waits.
    let growing = vec![
        claim("db-1", 1, Some(1)),
        claim("db-2", 2, Some(1)),
        claim("db-3", 1, Some(1)),
    ];
    let Growth::Waiting(why) = next(&growing) else {
        panic!()
    };
    assert!(why.contains("claim db-2 is growing to 2Gi"), "{why}");
}

#[test]
fn shrinking_and_a_class_that_cannot_grow_are_refused_naming_the_field() {
    let none = BTreeMap::new();
    let claims = vec![claim("db-1", 2, Some(2)), claim("db-2", 2, Some(2))];
    let Growth::Refused(why) = plan(&asked("1Gi", &claims, &none), &classes(true), None) else {
        panic!()
    };
    assert!(why.contains("spec.storage.size is 1Gi, less than the 2Gi claim db-1 holds: claims cannot shrink; set it back to 2Gi"), "{why}");
    let Growth::Refused(why) = plan(&asked("3Gi", &claims, &none), &classes(false), None) else {
        panic!()
    };
    assert!(
        why.contains("StorageClass \"fast\" of claim db-1 does not allow volume expansion"),
        "{why}"
    );
    assert!(why.contains("take back spec.storage.size"), "{why}");
    let Growth::Refused(why) = plan(&asked("3Gi", &claims, &none), &BTreeMap::new(), None) else {
        panic!()
    };
    assert!(
        why.contains("no StorageClass the operator can read"),
        "{why}"
    );
    assert_eq!(
        plan(&asked("2Gi", &claims, &none), &classes(false), None),
        Growth::Nothing
    );
}

#[test]
fn past_the_threshold_every_claim_grows_by_the_increment_replicas_first() {
    let p = policy("25%", "4Gi");
    let decide = |claims: &[ClaimView], usage: &BTreeMap<String, VolumeUsage>| {
        with_policy(&p, claims, usage, true)
    };
    // Under the threshold: nothing.
    let calm = BTreeMap::from([
        ("db-1".to_string(), used(1, 79)),
        ("db-2".to_string(), used(1, 50)),
    ]);
    assert_eq!(decide(&three(1, 1, 1), &calm), Growth::Nothing);
    // The primary passes 80%: the replicas grow first, to 1Gi + 25%.
    let full = BTreeMap::from([
        ("db-1".to_string(), used(1, 83)),
        ("db-2".to_string(), used(1, 50)),
    ]);
    let Growth::Expand { claim, to, why } = decide(&three(1, 1, 1), &full) else {
        panic!()
    };
    assert_eq!((claim.as_str(), to.as_str()), ("db-2", "1280Mi"));
    assert!(why.contains("instance db-1's data volume is 83% full, past spec.storage.autoGrow.usedPercent (80%): every data claim grows to 1280Mi"), "{why}");
    // Part way, the rest follow to the same size whatever their use: db-3,
    // then the primary.
    let mut claims = three(1, 1, 1);
    claims[1] = ClaimView {
        requested: ("1280Mi".into(), 1280 << 20),
        capacity: Some(1280 << 20),
        ..claims[1].clone()
    };
    let db1 = BTreeMap::from([("db-1".to_string(), used(1, 50))]);
    let Growth::Expand { claim, to, .. } = decide(&claims, &db1) else {
        panic!()
    };
    assert_eq!((claim.as_str(), to.as_str()), ("db-3", "1280Mi"));
    // Larger claims than spec.storage.size are the policy's, not a shrink.
    let grown = three(2, 2, 2);
    assert_eq!(decide(&grown, &BTreeMap::new()), Growth::Nothing);
}

#[test]
fn a_step_waits_for_the_file_system_and_stops_at_the_maximum() {
    let p = policy("1Gi", "2Gi");
    let decide = |claims: &[ClaimView], usage: &BTreeMap<String, VolumeUsage>| {
        with_policy(&p, claims, usage, true)
    };
    // Just after the last step the measurements may be of the file
    // systems before they grew: no next step until they settle.
    let full = BTreeMap::from([("db-2".to_string(), used(2, 90))]);
    let soon = plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", &p)),
            last_step_ms: Some(1_000_000 - SETTLE_MS + 1),
            ..asked("1Gi", &three(2, 2, 2), &full)
        },
        &classes(true),
        Some("db-1"),
    );
    assert!(
        matches!(&soon, Growth::Waiting(w) if w.contains("waits until the measurements are of the grown file systems")),
        "{soon:?}"
    );
    let p3 = policy("1Gi", "3Gi");
    let settled = plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", &p3)),
            last_step_ms: Some(1_000_000 - SETTLE_MS),
            ..asked("1Gi", &three(2, 2, 2), &full)
        },
        &classes(true),
        Some("db-1"),
    );
    assert!(
        matches!(&settled, Growth::Expand { claim, to, .. } if claim == "db-2" && to == "3Gi"),
        "{settled:?}"
    );
    // Grown and full again at the maximum: a warning, no step.
    let full = BTreeMap::from([("db-2".to_string(), used(2, 96))]);
    let Growth::AtMaximum(why) = decide(&three(2, 2, 2), &full) else {
        panic!()
    };
    assert!(
        why.contains("its claims are at spec.storage.autoGrow.maximum (2Gi)"),
        "{why}"
    );
    // A step never passes the maximum.
    let p = policy("5Gi", "1536Mi");
    let full = BTreeMap::from([("db-2".to_string(), used(1, 90))]);
    let g = plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", &p)),
            ..asked("1Gi", &three(1, 1, 1), &full)
        },
        &classes(true),
        Some("db-1"),
    );
    assert!(
        matches!(&g, Growth::Expand { to, .. } if to == "1536Mi"),
        "{g:?}"
    );
}

#[test]
fn a_class_that_cannot_grow_refuses_the_policy_naming_its_field() {
    let p = policy("25%", "4Gi");
    let full = BTreeMap::from([("db-1".to_string(), used(1, 90))]);
    let claims = three(1, 1, 1);
    let Growth::Refused(why) = plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", &p)),
            ..asked("1Gi", &claims, &full)
        },
        &classes(false),
        Some("db-1"),
    ) else {
        panic!()
    };
    assert!(
        why.starts_with("instance db-1's data volume is 90% full"),
        "{why}"
    );
    assert!(why.contains("does not allow volume expansion"), "{why}");
    assert!(why.contains("take back spec.storage.autoGrow"), "{why}");
}

#[test]
fn quantities_are_written_in_the_largest_whole_unit() {
    assert_eq!(quantity(5 * GI), "5Gi");
    assert_eq!(quantity(1280 << 20), "1280Mi");
    assert_eq!(quantity(1000), "1000");
}

/// A policy whose threshold (95%) the disk guard's reserve comes before,
/// growing by `increment` up to 4Gi.
fn at_95_percent(increment: &str) -> AutoGrowSpec {
    AutoGrowSpec {
        used_percent: 95,
        ..policy(increment, "4Gi")
    }
}

/// A 1 GiB data volume with `mib` MiB left.
fn gib_volume_with_mib_left(mib: u64) -> VolumeUsage {
    VolumeUsage {
        volume: "data".into(),
        size_bytes: 1 << 30,
        used_bytes: (1 << 30) - (mib << 20),
        available_bytes: mib << 20,
    }
}

#[test]
fn a_volume_the_disk_guard_finds_short_grows_whatever_the_threshold() {
    // 95% threshold, but a 1 GiB volume with less than the guard's
    // reserve left (it would refuse writes before reaching 95%).
    let p = at_95_percent("25%");
    let short = gib_volume_with_mib_left(100);
    assert!(short.used_percent() < 95);
    let usage = BTreeMap::from([("db-2".to_string(), short)]);
    let g = with_policy(&p, &three(1, 1, 1), &usage, true);
    assert!(
        matches!(&g, Growth::Expand { claim, .. } if claim == "db-2"),
        "{g:?}"
    );
}

#[test]
fn while_writes_are_refused_the_policy_grows_until_the_guard_lets_go() {
    // A small increment left the volume over its reserve but under twice
    // it: writes are still refused, so the policy takes another step.
    let p = at_95_percent("1%");
    let between = gib_volume_with_mib_left(300);
    let usage = BTreeMap::from([("db-2".to_string(), between)]);
    assert_eq!(
        with_policy(&p, &three(1, 1, 1), &usage, true),
        Growth::Nothing
    );
    let refused = plan(
        &VolumeClaims {
            auto_grow: Some(("spec.storage.autoGrow", &p)),
            writes_refused: true,
            ..asked("1Gi", &three(1, 1, 1), &usage)
        },
        &classes(true),
        Some("db-1"),
    );
    assert!(
        matches!(&refused, Growth::Expand { claim, .. } if claim == "db-2"),
        "{refused:?}"
    );
}
