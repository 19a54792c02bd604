use super::*;

/// What parsing a Cluster with this `spec.storage` says is wrong.
fn errors(yaml: &str) -> Vec<String> {
    let m = format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  storage:\n{yaml}"
    );
    match crate::validation::parse_cluster(&m) {
        Ok(_) => Vec::new(),
        Err(e) => vec![e.to_string()],
    }
}

#[test]
fn a_policy_reads_its_increment_as_a_size_or_a_share() {
    let g = |inc: &str| AutoGrowSpec {
        used_percent: 80,
        increment: inc.into(),
        maximum: "10Gi".into(),
    };
    assert_eq!(g("25%").increment(), Some(Increment::Percent(25)));
    assert_eq!(g("1Gi").increment(), Some(Increment::Bytes(1 << 30)));
    assert_eq!(g("0%").increment(), None);
    assert_eq!(g("150%").increment(), None);
    assert_eq!(g("lots").increment(), None);
}

#[test]
fn a_bad_policy_names_its_field_and_the_fix() {
    let e = errors(
        "    size: 2Gi\n    autoGrow:\n      usedPercent: 99\n      increment: lots\n      maximum: 1Gi\n",
    );
    let all = e.join("\n");
    assert!(
        all.contains("spec.storage.autoGrow.usedPercent: 99 is outside 50 to 95"),
        "{all}"
    );
    assert!(
        all.contains("spec.storage.autoGrow.increment: \"lots\" is neither a size"),
        "{all}"
    );
    assert!(
        all.contains("spec.storage.autoGrow.maximum: 1Gi is less than the size asked for (2Gi)"),
        "{all}"
    );
    let e = errors("    binlogs:\n      autoGrow:\n        maximum: big\n");
    assert!(
        e.join("\n")
            .contains("spec.storage.binlogs.autoGrow.maximum: \"big\" is not a storage size"),
        "{e:?}"
    );
    // The defaults: 80%, 25%, and a maximum of at least the size.
    assert!(errors("    size: 1Gi\n    autoGrow:\n      maximum: 4Gi\n").is_empty());
}
