//! A volume's own file system: a sparse image file the size of its claim,
//! formatted XFS and loop-mounted where the PersistentVolume points. So a
//! full volume is a real `ENOSPC` and a grown one real extra space, grown
//! online (`xfs_growfs`) as a CSI driver that allows expansion does. XFS
//! rather than ext4 because growing ext4 online needs `CAP_SYS_RESOURCE`,
//! which containers on these machines lack. XFS's smallest file system is
//! 300 MiB: a smaller claim gets that much.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::cmd::run;

/// XFS refuses to make a smaller file system.
pub const SMALLEST: u64 = 300 << 20;

fn image(path: &Path) -> PathBuf {
    path.with_extension("img")
}

/// Make (once) and mount the file system of `bytes` at `path`.
pub fn make(path: &Path, bytes: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if crate::kubelet::is_mountpoint(path) {
        return Ok(());
    }
    std::fs::create_dir_all(path)?;
    let img = image(path);
    if !img.exists() {
        let partial = img.with_extension("partial");
        let f = std::fs::File::create(&partial)?;
        f.set_len(bytes.max(SMALLEST))?;
        drop(f);
        run("mkfs.xfs", &["-q", "-f", &partial.display().to_string()]).context(
            "making the volume's XFS file system (scripts/setup --kube installs xfsprogs)",
        )?;
        std::fs::rename(&partial, &img)?;
    }
    run(
        "mount",
        &[
            "-o",
            "loop",
            &img.display().to_string(),
            &path.display().to_string(),
        ],
    )?;
    // Writable by the Pod's user; the kubelet gives it the Pod's fsGroup.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))?;
    Ok(())
}

/// Grow the mounted file system at `path` to `bytes`, online.
pub fn grow(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let img = image(path);
    let f = std::fs::OpenOptions::new().write(true).open(&img)?;
    if f.metadata()?.len() < bytes {
        f.set_len(bytes)?;
    }
    drop(f);
    let dir = path.display().to_string();
    let device = run("findmnt", &["-n", "-o", "SOURCE", &dir])?;
    run("losetup", &["-c", device.trim()])?;
    run("xfs_growfs", &[&dir])?;
    Ok(())
}

/// Unmount and delete the volume and its data.
pub fn remove(path: &Path) {
    if crate::kubelet::is_mountpoint(path) {
        let _ = nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(image(path));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statvfs(p: &Path) -> (u64, u64) {
        let s = nix::sys::statvfs::statvfs(p).unwrap();
        let b = s.fragment_size() as u64;
        (s.blocks() as u64 * b, s.blocks_available() as u64 * b)
    }

    /// Needs root and xfsprogs (the real node's own needs).
    #[test]
    #[ignore = "needs root, loop devices and xfsprogs (scripts/setup --kube): scripts/test-kube runs it"]
    fn a_volume_fills_for_real_and_grows_online() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pvc-1");
        make(&path, 320 << 20).unwrap();
        make(&path, 320 << 20).unwrap(); // once
        let (size, _) = statvfs(&path);
        assert!(size > 200 << 20 && size <= 320 << 20, "{size}");
        // Fill it: a real ENOSPC.
        let mut f = std::fs::File::create(path.join("fill")).unwrap();
        let chunk = vec![7u8; 1 << 20];
        let err = loop {
            if let Err(e) = f.write_all(&chunk).and_then(|_| f.sync_data()) {
                break e;
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc_enospc()), "{err}");
        grow(&path, 640 << 20).unwrap();
        let (bigger, free) = statvfs(&path);
        assert!(bigger > size + (250 << 20), "{size} -> {bigger}");
        assert!(free > 250 << 20, "{free}");
        f.write_all(&chunk).unwrap();
        drop(f);
        remove(&path);
        assert!(!path.exists() && !image(&path).exists());
    }

    fn libc_enospc() -> i32 {
        nix::errno::Errno::ENOSPC as i32
    }
}
