#[test]
fn the_settings_durability_rests_on_are_refused_naming_the_field() {
    for name in [
        "rpl_semi_sync_master_wait_no_slave",
        "rpl-semi-sync-source-wait-no-replica",
        "rpl_semi_sync_source_timeout",
        "read_only",
    ] {
        let m = format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  mysql:\n    parameters:\n      {name}: \"OFF\"\n"
        );
        let e = super::parse_cluster(&m).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "spec.mysql.parameters.{name}: is owned by the operator"
            )),
            "{e}"
        );
    }
}
