//! Running the host's tools (`ip`, `nft`, `ctr`, …) with their output
//! as the error when they fail.

use std::process::Command;

use anyhow::{Context as _, bail};

/// Run a command, failing with what it printed.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
