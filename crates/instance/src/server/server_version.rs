//! The server version on an instance's data: which version has run on it
//! (recorded in the data directory after each start), the last line of
//! defence against starting an older server on newer data, the version the
//! system tables were upgraded to, and MariaDB's `mariadb-upgrade`.

use std::path::Path;

use cnmysql_api::Flavor;
use cnmysql_core::upgrade::version::Version;

use crate::config::InstanceConfig;

/// The file, in the data directory, that names the newest server version
/// that has run on it.
pub const DATA_VERSION_FILE: &str = "cnmysql_data_version";

/// The newest version that has run on the data in `data_dir`.
pub fn data_version(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(DATA_VERSION_FILE)).ok()?;
    Version::parse(&text).map(|v| v.to_string())
}

/// Record that `running` has run on the data (kept when an older one
/// somehow did: the newest is what matters).
pub fn record(data_dir: &Path, running: &str) -> std::io::Result<()> {
    let Some(new) = Version::parse(running) else {
        return Ok(());
    };
    if data_version(data_dir)
        .and_then(|v| Version::parse(&v))
        .is_some_and(|old| {
            old.compare(&new).is_ge() && old.to_string().len() >= new.to_string().len()
        })
    {
        return Ok(());
    }
    let tmp = data_dir.join(format!("{DATA_VERSION_FILE}.tmp"));
    std::fs::write(&tmp, format!("{new}\n"))?;
    std::fs::rename(&tmp, data_dir.join(DATA_VERSION_FILE))
}

/// Whether the program `program` may start on the data in `data_dir`:
/// never an older version than has run on it.
pub fn check_start(data_dir: &Path, program: Option<&str>) -> Result<(), String> {
    let (Some(have), Some(run)) = (
        data_version(data_dir).and_then(|v| Version::parse(&v)),
        program.and_then(Version::parse),
    ) else {
        return Ok(());
    };
    if run.compare(&have).is_lt() {
        return Err(format!(
            "refusing to start {run} on data that {have} has run on: a downgrade is not supported. Set spec.mysql.image / spec.mysql.version back to {have} or newer"
        ));
    }
    Ok(())
}

/// The version the system tables were last upgraded to: MariaDB's
/// `mariadb_upgrade_info` (`mysql_upgrade_info` before 11), MySQL's
/// `mysql_upgrade_history` (its last entry).
pub fn system_tables_version(flavor: Flavor, data_dir: &Path) -> Option<String> {
    match flavor {
        Flavor::Mariadb => ["mariadb_upgrade_info", "mysql_upgrade_info"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(data_dir.join(f)).ok())
            .find_map(|t| Version::parse(&t))
            .map(|v| v.to_string()),
        Flavor::Mysql => {
            let text = std::fs::read_to_string(data_dir.join("mysql_upgrade_history")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            v["upgrade_history"]
                .as_array()?
                .last()?
                .get("version")?
                .as_str()
                .and_then(Version::parse)
                .map(|v| v.to_string())
        }
    }
}

/// Bring the system tables to the running version: MariaDB runs
/// `mariadb-upgrade` (not binary-logged: each instance upgrades its own;
/// it does nothing when they are already at this major.minor); MySQL did
/// it itself at start. Returns what it did.
pub async fn upgrade_system_tables(
    cfg: &InstanceConfig,
    admin_password: &str,
) -> anyhow::Result<String> {
    if cfg.flavor() == Flavor::Mysql {
        return Ok("MySQL upgraded its system tables itself at start".into());
    }
    let program = cfg
        .programs
        .upgrade
        .clone()
        .ok_or_else(|| anyhow::anyhow!("no mariadb-upgrade among the server programs: install mariadb-client, or use a server image that has it"))?;
    // Credentials in a private file, never on a command line.
    let defaults = cfg.run_dir.join("upgrade.cnf");
    let client = format!(
        "[client]\nuser={}\npassword={}\nsocket={}\n",
        cnmysql_api::names::ADMIN_USER,
        admin_password,
        cfg.socket().display()
    );
    cnmysql_tls::write_private(&defaults, &client, true)?;
    let began = std::time::Instant::now();
    let out = cfg
        .programs
        .tokio_command(&program)
        .arg(format!("--defaults-extra-file={}", defaults.display()))
        .arg("--skip-write-binlog")
        .output()
        .await
        .map_err(|e| cfg.programs.start_error(&program, &e));
    let _ = std::fs::remove_file(&defaults);
    let out = out?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_string();
    anyhow::ensure!(
        out.status.success(),
        "mariadb-upgrade failed ({}): {last}",
        out.status
    );
    Ok(format!(
        "mariadb-upgrade done in {:.1}s: {last}",
        began.elapsed().as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_is_kept_and_an_older_server_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_start(dir.path(), Some("10.11.18")), Ok(()));
        record(dir.path(), "10.11.18-MariaDB-0+deb12u1").unwrap();
        assert_eq!(data_version(dir.path()).as_deref(), Some("10.11.18"));
        record(dir.path(), "10.11.19").unwrap();
        record(dir.path(), "10.11.18").unwrap();
        assert_eq!(data_version(dir.path()).as_deref(), Some("10.11.19"));
        let e = check_start(dir.path(), Some("10.11.18")).unwrap_err();
        assert!(
            e.contains("refusing to start 10.11.18 on data that 10.11.19 has run on"),
            "{e}"
        );
        assert_eq!(check_start(dir.path(), Some("11.8.9")), Ok(()));
    }

    #[test]
    fn system_tables_versions_are_read_per_flavour() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mysql_upgrade_info"), "10.11.19-MariaDB").unwrap();
        assert_eq!(
            system_tables_version(Flavor::Mariadb, dir.path()).as_deref(),
            Some("10.11.19")
        );
        std::fs::write(dir.path().join("mysql_upgrade_history"), r#"{"file_format":"1","upgrade_history":[{"version":"9.6.0"},{"version":"9.7.4-2","maturity":"LTS"}]}"#).unwrap();
        assert_eq!(
            system_tables_version(Flavor::Mysql, dir.path()).as_deref(),
            Some("9.7.4")
        );
    }
}
