//! An initialised, never started data directory per server build, kept in
//! the user's cache and copied for each new primary: initialising from it
//! takes a fraction of a second instead of running the install program.

use std::fs::File;
use std::path::PathBuf;

use cnmysql_api::Flavor;
use cnmysql_instance::bootstrap::install_db;
use cnmysql_instance::config::Programs;
use nix::fcntl::{Flock, FlockArg};

/// The template directory for these programs, created on first use.
pub fn ensure_template(flavor: Flavor, programs: &Programs) -> anyhow::Result<PathBuf> {
    let version = programs.version_line();
    let key: String = version
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or("unknown")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let base = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("cnmysql")
        .join("templates");
    std::fs::create_dir_all(&base)?;
    let dir = base.join(format!(
        "{}-{key}",
        programs
            .mysqld
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("mysqld")
    ));
    if dir.join("mysql").is_dir() {
        return Ok(dir);
    }
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(base.join(".lock"))?;
    let _guard = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
    if dir.join("mysql").is_dir() {
        return Ok(dir);
    }
    let tmp = base.join(format!(".tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    install_db(flavor, programs, &tmp)?;
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}
