//! The manager's run directory: sockets, PID files, the log FIFO and the
//! option files it renders (those holding credentials are written private
//! on their own, see `cnmysql_tls::write_private`).
//!
//! Locally the manager makes the directory and keeps it to itself (0700).
//! In a Pod it is a volume the kubelet made: owned by root, group the Pod's
//! `fsGroup`, mode 2777, and only this Pod's containers can see it. Nobody
//! but its owner may change a directory's mode, so the manager (uid 999
//! there) leaves such a directory as the kubelet made it.

use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

/// What the manager does with the mode of a run directory owned by
/// `owner` when it runs as `me`.
#[derive(Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ours: make it private.
    MakePrivate,
    /// The platform's volume: leave its mode alone.
    Leave,
}

pub fn mode_for(owner: u32, me: u32) -> Mode {
    if owner == me {
        Mode::MakePrivate
    } else {
        Mode::Leave
    }
}

/// Make sure `dir` exists and is usable; an error names the path, what
/// failed and what to do.
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
    let named = |what: &str, e: io::Error| {
        anyhow::anyhow!(
            "run directory {}: {what}: {e} (the manager runs as uid {}; give it a directory it can write, e.g. an emptyDir volume)",
            dir.display(),
            nix::unistd::geteuid()
        )
    };
    std::fs::create_dir_all(dir).map_err(|e| named("cannot create it", e))?;
    let meta = std::fs::metadata(dir).map_err(|e| named("cannot read it", e))?;
    if mode_for(meta.uid(), nix::unistd::geteuid().as_raw()) == Mode::MakePrivate {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| named("cannot make it private (mode 0700)", e))?;
    }
    // Whatever its mode, the manager must be able to create files in it.
    let probe = dir.join(".cnmysql-write-check");
    std::fs::write(&probe, b"").map_err(|e| named("cannot create files in it", e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A directory of the manager's own inside the run directory, private.
pub fn make_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| anyhow::anyhow!("cannot make the private directory {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_of_our_own_is_made_private() {
        assert_eq!(mode_for(999, 999), Mode::MakePrivate);
        assert_eq!(mode_for(0, 0), Mode::MakePrivate);
        // The kubelet's emptyDir (root-owned, fsGroup) seen by uid 999.
        assert_eq!(mode_for(0, 999), Mode::Leave);
    }

    #[test]
    fn a_new_directory_is_created_private() {
        let t = tempfile::tempdir().unwrap();
        let run = t.path().join("a/run");
        prepare(&run).unwrap();
        let mode = std::fs::metadata(&run).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_directory_that_cannot_be_made_names_the_path() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let err = prepare(&file.join("run")).unwrap_err().to_string();
        assert!(
            err.contains(&file.join("run").display().to_string()),
            "{err}"
        );
        assert!(err.contains("cannot create it"), "{err}");
    }
}
