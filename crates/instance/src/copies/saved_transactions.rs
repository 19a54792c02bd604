//! Saving the transactions only one instance holds before its data is
//! replaced: their events, read from its own binary log with the flavour's
//! reader (`mysqlbinlog --include-gtids`, `mariadb-binlog
//! --start-position`), into a file on its volume beside the data directory,
//! and into the backup store when the Cluster has one. The file replays
//! with the command-line client once a person has checked it.

use crate::binlog_files::binlog_files;
use std::path::{Path, PathBuf};

use cnmysql_api::Flavor;
use cnmysql_gtid::Beyond;
use object_store::ObjectStoreExt as _;

use crate::config::InstanceConfig;

/// Where saved transactions are kept: on the instance's volume, outside
/// the data directory that is about to be replaced.
pub fn dir(cfg: &InstanceConfig) -> PathBuf {
    cfg.data_dir
        .parent()
        .unwrap_or(Path::new("/"))
        .join("cnmysql-saved")
}

/// The reader's arguments that select `beyond`.
fn selection(flavor: Flavor, beyond: &Beyond) -> Vec<String> {
    match (flavor, beyond) {
        (Flavor::Mysql, Beyond::Gtids(set)) => vec![format!("--include-gtids={set}")],
        // Only the filter: the files' own order is checked by the server
        // that wrote them.
        (_, Beyond::After(pos)) => vec![
            format!("--start-position={pos}"),
            "--skip-gtid-strict-mode".into(),
        ],
        (Flavor::Mariadb, Beyond::Gtids(set)) => vec![format!("--start-position={set}")],
    }
}

/// Write the events of `beyond` to a new file under [`dir`]; its path.
pub async fn save(cfg: &InstanceConfig, beyond: &Beyond) -> anyhow::Result<PathBuf> {
    let reader = cfg.programs.binlog.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "no binary log reader (mysqlbinlog, mariadb-binlog) beside the server: cannot save the transactions only this instance holds, so its data is kept"
        )
    })?;
    let out_dir = dir(cfg);
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out_dir.display()))?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let path = out_dir.join(format!("{}-{stamp}.sql", cfg.instance));
    let file = std::fs::File::create(&path)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
    let mut cmd = cfg.programs.tokio_command(&reader);
    // --verbose: each row change also as commented pseudo-SQL (`### INSERT
    // INTO ...`), for the person who reads the file before replaying it.
    cmd.arg("--verbose")
        .args(selection(cfg.flavor(), beyond))
        .args(binlog_files(&cfg.binlog_dir(), &cfg.data_dir)?)
        .stdout(file.try_clone()?)
        .stderr(std::process::Stdio::piped());
    // Not `output()`: it would capture stdout instead of the file.
    let out = cmd
        .spawn()
        .map_err(|e| cfg.programs.start_error(&reader, &e))?
        .wait_with_output()
        .await?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&path);
        anyhow::bail!(
            "{} could not read the transactions only this instance holds ({}): {}; its data is kept",
            reader.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    file.sync_all()?;
    std::fs::File::open(&out_dir)?.sync_all()?;
    Ok(path)
}

/// Store the saved file in the Cluster's backup store, if it has one; its
/// address there.
pub async fn upload(cfg: &InstanceConfig, path: &Path) -> anyhow::Result<Option<String>> {
    let Some(backup) = cfg.spec.backup.as_ref() else {
        return Ok(None);
    };
    let dest = cnmysql_backup::destination::open_for_cluster(
        &backup.object_store,
        cfg.secrets.backup_dir.as_deref(),
        &cfg.cluster,
    )
    .map_err(anyhow::Error::msg)?
    .under("diverged");
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("saved.sql")
        .to_string();
    let bytes = tokio::fs::read(path).await?;
    dest.store
        .put(&dest.key(&name), object_store::PutPayload::from(bytes))
        .await
        .map_err(|e| anyhow::anyhow!("storing {name} in {}: {e}", dest.path))?;
    Ok(Some(format!("{}/{name}", dest.path.trim_end_matches('/'))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_selects_exactly_what_only_this_instance_holds() {
        assert_eq!(
            selection(Flavor::Mysql, &Beyond::Gtids("u:5-7".into())),
            ["--include-gtids=u:5-7"]
        );
        assert_eq!(
            selection(Flavor::Mariadb, &Beyond::After("0-1-100".into())),
            ["--start-position=0-1-100", "--skip-gtid-strict-mode"]
        );
    }

    #[test]
    fn binlog_files_come_from_the_index_relative_to_the_data_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("mysql-bin.index"),
            "./mysql-bin.000001\n./mysql-bin.000002\n",
        )
        .unwrap();
        let files = binlog_files(d.path(), d.path()).unwrap();
        assert_eq!(
            files,
            [
                d.path().join("./mysql-bin.000001"),
                d.path().join("./mysql-bin.000002")
            ]
        );
    }
}
