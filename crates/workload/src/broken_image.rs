//! A server image that does not start, for failure tests: a copy of a
//! MariaDB image in the image store (hard links, so it costs nothing)
//! whose `mariadbd` prints a line and exits 1. Removed when dropped.

use std::path::PathBuf;

pub struct BrokenImage {
    dir: PathBuf,
    good: PathBuf,
    /// `mariadb:<tag>`.
    pub reference: String,
}

impl BrokenImage {
    /// A broken copy of `mariadb:<of>` as `mariadb:<tag>`.
    pub fn new(of: &str, tag: &str) -> anyhow::Result<BrokenImage> {
        let store = cnmysql_instance::server_image::default_store();
        let good = store.join("mariadb").join(of);
        let dir = store.join("mariadb").join(tag);
        let _ = std::fs::remove_dir_all(&dir);
        let st = std::process::Command::new("cp")
            .arg("-al")
            .arg(&good)
            .arg(&dir)
            .status()?;
        anyhow::ensure!(st.success(), "cannot copy {}", good.display());
        let reference = format!("mariadb:{tag}");
        let meta = std::fs::read_to_string(dir.join("image.json"))?;
        let mut meta: serde_json::Value = serde_json::from_str(&meta)?;
        meta["image"] = reference.clone().into();
        // A link to the original: replaced, not written through.
        std::fs::remove_file(dir.join("image.json"))?;
        std::fs::write(dir.join("image.json"), meta.to_string())?;
        let b = BrokenImage {
            dir,
            good,
            reference,
        };
        std::fs::remove_file(b.server())?;
        std::fs::write(
            b.server(),
            "#!/bin/sh\necho 'this server image is broken' >&2\nexit 1\n",
        )?;
        std::fs::set_permissions(
            b.server(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        Ok(b)
    }

    fn server(&self) -> PathBuf {
        self.dir.join("rootfs/usr/sbin/mariadbd")
    }

    /// The cause fixed: the real server put back.
    pub fn repair(&self) -> anyhow::Result<()> {
        std::fs::remove_file(self.server())?;
        std::fs::hard_link(self.good.join("rootfs/usr/sbin/mariadbd"), self.server())?;
        Ok(())
    }
}

impl Drop for BrokenImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
