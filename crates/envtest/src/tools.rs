//! Where the test tools are: the ones `scripts/setup --tests` puts in the
//! user's cache (promtool and prometheus, weed, Azurite, kustomize).

use std::path::PathBuf;

use anyhow::{Context, bail};

/// A test tool: the file `env` names, `name` on the PATH, or `cached`
/// under the user's cache directory, where `scripts/setup` puts it.
pub fn find_tool(env: &str, name: &str, cached: &str, what: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
    {
        return Ok(p);
    }
    let cached = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set")?
        .join(cached);
    if cached.is_file() {
        return Ok(cached);
    }
    bail!(
        "{what} was not found ({} is missing): run scripts/setup --tests, or set {env}",
        cached.display()
    )
}
