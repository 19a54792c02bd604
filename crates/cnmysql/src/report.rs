//! The report bundle both platforms' `report` write: the files they
//! gathered, in one gzip'd tar under a directory named after the report,
//! so that unpacking it makes one directory.

use std::path::{Path, PathBuf};

/// The default file: `report-<cluster>-<YYYYMMDDhhmmss>.tar.gz` (UTC).
pub(crate) fn default_path(cluster: &str) -> PathBuf {
    let now = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S");
    PathBuf::from(format!("report-{cluster}-{now}.tar.gz"))
}

/// Write `files` (path in the bundle, text) to `out`; refuses to overwrite.
pub(crate) fn write(out: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let top = out
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.trim_end_matches(".tar.gz").trim_end_matches(".tgz"))
        .filter(|n| !n.is_empty())
        .unwrap_or("report")
        .to_string();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("creating {} (it must not exist yet)", out.display()))?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = jiff::Timestamp::now().as_second().max(0) as u64;
    for (path, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(mtime);
        h.set_cksum();
        tar.append_data(&mut h, format!("{top}/{path}"), text.as_bytes())
            .with_context(|| format!("writing {path} into {}", out.display()))?;
    }
    tar.into_inner()?.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_unpacks_into_one_directory_and_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("report-db-1.tar.gz");
        let files = vec![
            ("cluster.yaml".to_string(), "kind: Cluster\n".to_string()),
            ("logs/db-1.jsonl".to_string(), "{}\n".to_string()),
        ];
        write(&out, &files).unwrap();
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap());
        let mut names: Vec<String> = tar::Archive::new(gz)
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["report-db-1/cluster.yaml", "report-db-1/logs/db-1.jsonl"]
        );
        let again = write(&out, &files).unwrap_err();
        assert!(format!("{again:#}").contains("must not exist"), "{again:#}");
    }
}
