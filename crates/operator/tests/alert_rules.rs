//! The alert rules shipped in `deploy/prometheus-rules.yaml` are valid and
//! fire as `deploy/prometheus-rules.test.yaml` says (a stuck rollout after
//! 30 minutes without a step, not a moving or finished one; a failed server
//! upgrade), checked by Prometheus's own `promtool`. `scripts/setup --tests` puts
//! promtool in the user's cache (from Debian's `prometheus` package).

use std::path::PathBuf;
use std::process::Command;

fn promtool() -> PathBuf {
    cnmysql_envtest::tools::find_tool(
        "CNMYSQL_PROMTOOL",
        "promtool",
        "cnmysql/tools/usr/bin/promtool",
        "promtool, needed to check the alert rules, which scripts/setup --tests takes out of Debian's package prometheus",
    )
    .unwrap()
}

fn run(args: &[&str]) {
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
    let out = Command::new(promtool())
        .args(args)
        .current_dir(deploy)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_are_valid_and_fire_as_their_tests_say() {
    run(&["check", "rules", "prometheus-rules.yaml"]);
    run(&["test", "rules", "prometheus-rules.test.yaml"]);
}
