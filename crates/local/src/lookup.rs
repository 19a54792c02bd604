//! Finding a local cluster's state directory from what a command was
//! given: `--state-dir`, or the cluster's name.

use std::path::Path;

use crate::state::{self, StateDir};

/// Resolve the state directory: the flag, or the default for the cluster in
/// the manifest.
pub fn resolve_state_dir(flag: Option<&Path>, cluster: Option<&str>) -> anyhow::Result<StateDir> {
    match (flag, cluster) {
        (Some(p), _) => Ok(StateDir::new(std::path::absolute(p)?)),
        (None, Some(c)) => Ok(StateDir::new(state::default_state_dir(c))),
        (None, None) => anyhow::bail!(
            "name the cluster (e.g. `cluster-example`) or its state directory (--state-dir DIR)"
        ),
    }
}

/// The state directory of a cluster that must already exist (every command
/// but `up`), with an error that says what was looked for and what to do.
pub fn existing_state_dir(flag: Option<&Path>, cluster: Option<&str>) -> anyhow::Result<StateDir> {
    let dir = resolve_state_dir(flag, cluster)?;
    if !dir.exists() {
        let what = match (flag, cluster) {
            (None, Some(c)) => format!("there is no local cluster {c}"),
            _ => "there is no local cluster there".to_string(),
        };
        anyhow::bail!(
            "{what}: {} has no cluster.yaml. Create one with `cnmysql local up -f <manifest>`; a cluster made with --state-dir is named with the same --state-dir",
            dir.root.display()
        );
    }
    Ok(dir)
}
