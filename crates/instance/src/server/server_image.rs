//! Server images: root filesystems that each hold one server version, built
//! from Debian's packages by `scripts/images` into a store outside the
//! repository (`<store>/<name>/<tag>/rootfs` with `image.json` beside it).
//!
//! On the local platform the instance manager runs the server programs of
//! the image a Cluster names (`spec.mysql.image`): each program starts in a
//! private mount namespace where the image's `/usr` (programs, libraries,
//! plugins, character sets, messages) stands in for the host's; every other
//! path (data, sockets, certificates) is the host's own. On Kubernetes the
//! image is the mysql container's whole root filesystem instead, and the
//! programs run as they are.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use cnmysql_api::Flavor;
use serde::{Deserialize, Serialize};

/// Where images are kept unless `CNMYSQL_IMAGE_STORE` says otherwise.
pub fn default_store() -> PathBuf {
    if let Some(s) = std::env::var_os("CNMYSQL_IMAGE_STORE").filter(|s| !s.is_empty()) {
        return PathBuf::from(s);
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/cnmysql/images")
}

/// What `scripts/images` records beside a root filesystem.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    pub image: String,
    pub flavor: Flavor,
    /// The exact version the server states (`mysqld --version`).
    pub server_version: String,
    #[serde(default)]
    pub debian_suite: String,
    #[serde(default)]
    pub server_package: String,
}

/// A built image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerImage {
    pub reference: String,
    pub root: PathBuf,
    pub manifest: ImageManifest,
}

/// `name:tag` of a reference; a registry and path before the last `/` are
/// ignored (`docker.io/library/mysql:9.7` is `mysql:9.7`), a digest too.
pub fn name_and_tag(reference: &str) -> Result<(String, String), String> {
    let r = reference.split('@').next().unwrap_or(reference);
    let last = r.rsplit('/').next().unwrap_or(r);
    match last.split_once(':') {
        Some((n, t)) if !n.is_empty() && !t.is_empty() => Ok((n.to_string(), t.to_string())),
        _ => Err(format!(
            "server image {reference:?} has no tag: name one as NAME:TAG, for example mysql:9.7 or mariadb:10.11.19"
        )),
    }
}

/// Find `reference` in `store`, with an error that says how to build it.
pub fn resolve(store: &Path, reference: &str) -> Result<ServerImage, String> {
    let (name, tag) = name_and_tag(reference)?;
    let dir = store.join(&name).join(&tag);
    let manifest_path = dir.join("image.json");
    let text = std::fs::read_to_string(&manifest_path).map_err(|_| {
        format!(
            "server image {name}:{tag} is not in the image store {}: build it with `scripts/images {name}:{tag}` (or set CNMYSQL_IMAGE_STORE to the store that holds it)",
            store.display()
        )
    })?;
    let manifest: ImageManifest = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not an image manifest: {e}", manifest_path.display()))?;
    let root = dir.join("rootfs");
    if !root.join("usr").is_dir() {
        return Err(format!(
            "server image {name}:{tag}: {} has no usr/; rebuild it with `scripts/images --rebuild {name}:{tag}`",
            root.display()
        ));
    }
    Ok(ServerImage {
        reference: format!("{name}:{tag}"),
        root,
        manifest,
    })
}

/// Paths prepared before a fork, so that the child does nothing but system
/// calls between `fork` and `exec` (no allocation).
#[derive(Debug)]
pub struct Entry {
    usr: CString,
    ld_cache: Option<CString>,
}

impl Entry {
    pub fn new(root: &Path) -> Entry {
        let c = |p: PathBuf| CString::new(p.as_os_str().as_bytes()).expect("no NUL in a path");
        let cache = root.join("etc/ld.so.cache");
        Entry {
            usr: c(root.join("usr")),
            ld_cache: cache
                .is_file()
                .then(|| c(cache))
                .filter(|_| Path::new("/etc/ld.so.cache").is_file()),
        }
    }

    /// In the child, before `exec`: a private mount namespace in which the
    /// image's `/usr` (and its loader cache) replace the host's.
    ///
    /// # Safety
    /// Only between `fork` and `exec`: it makes system calls and nothing else.
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        // SAFETY: plain system calls on prepared NUL-terminated strings.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let root = c"/".as_ptr();
            if libc::mount(
                std::ptr::null(),
                root,
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(cache) = &self.ld_cache
                && libc::mount(
                    cache.as_ptr(),
                    c"/etc/ld.so.cache".as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::mount(
                self.usr.as_ptr(),
                c"/usr".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Why a program of an image could not start, in words a user can act on.
pub fn explain_start_error(image: &str, program: &Path, e: &std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!(
            "cannot run {} from server image {image}: entering a private mount namespace needs root (CAP_SYS_ADMIN): run cnmysql as root, or leave spec.mysql.image unset to use the server installed on this machine",
            program.display()
        )
    } else {
        format!(
            "cannot run {} from server image {image}: {e}",
            program.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_tag() {
        assert_eq!(
            name_and_tag("mysql:9.7").unwrap(),
            ("mysql".into(), "9.7".into())
        );
        assert_eq!(
            name_and_tag("docker.io/library/mariadb:10.11.19").unwrap(),
            ("mariadb".into(), "10.11.19".into())
        );
        assert_eq!(
            name_and_tag("localhost:5000/mysql:9.7@sha256:ab").unwrap(),
            ("mysql".into(), "9.7".into())
        );
        let e = name_and_tag("mysql").unwrap_err();
        assert!(e.contains("NAME:TAG"), "{e}");
    }

    #[test]
    fn a_missing_image_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = resolve(dir.path(), "mysql:9.7").unwrap_err();
        assert!(e.contains("scripts/images mysql:9.7"), "{e}");
        let d = dir.path().join("mysql/9.7");
        std::fs::create_dir_all(d.join("rootfs/usr")).unwrap();
        std::fs::write(
            d.join("image.json"),
            r#"{"image":"mysql:9.7","flavor":"mysql","serverVersion":"9.7.4"}"#,
        )
        .unwrap();
        let img = resolve(dir.path(), "mysql:9.7").unwrap();
        assert_eq!(img.manifest.server_version, "9.7.4");
        assert_eq!(img.manifest.flavor, Flavor::Mysql);
    }
}
