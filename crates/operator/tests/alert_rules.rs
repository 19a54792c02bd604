//! The alert rules shipped in `deploy/prometheus-rules.yaml` are valid and
//! fire as `deploy/prometheus-rules.test.yaml` says (a stuck rollout after
//! 30 minutes without a step, not a moving or finished one; a failed server
//! upgrade), checked by Prometheus's own `promtool`. `scripts/setup` puts
//! promtool in the user's cache (from Debian's `prometheus` package).

use std::path::PathBuf;
use std::process::Command;

fn promtool() -> PathBuf {
    if let Ok(p) = which("promtool") {
        return p;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default();
    let p = cache.join("cnmysql/tools/usr/bin/promtool");
    assert!(
        p.is_file(),
        "promtool is needed to check the alert rules: run scripts/setup (it fetches it from Debian's prometheus package into {})",
        p.display()
    );
    p
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
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
