//! Images are not pulled: the node is told which host files stand for an
//! image's executables. `REPO=PATH=HOST_FILE` maps a container path (or a
//! bare program name looked up on PATH) of any tag of image repository
//! REPO to a host file; REPO `*` applies to every image.
//!
//! A command that is such a path runs the host file; bare names are
//! symlinks in a directory put first on the container's PATH.
//!
//! An image of the server image store (`scripts/images`: `mysql:9.7`,
//! `mariadb:10.11.19`, …) is a real root filesystem instead: its containers
//! run inside it (shim.rs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

#[derive(Clone, Debug, Default)]
pub struct Images {
    map: BTreeMap<String, BTreeMap<String, PathBuf>>,
    /// The server image store, whose images are root filesystems.
    server_store: Option<PathBuf>,
}

/// An image reference without its tag or digest.
pub fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

impl Images {
    pub fn parse(specs: &[String]) -> anyhow::Result<Images> {
        let mut out = Images::default();
        for s in specs {
            let parts: Vec<&str> = s.splitn(3, '=').collect();
            let [repo, path, host] = parts[..] else {
                bail!(
                    "--image {s:?}: expected REPO=CONTAINER_PATH=HOST_FILE, e.g. ghcr.io/cloudnative-mysql/cnmysql=/usr/local/bin/cnmysql=/usr/local/bin/cnmysql"
                );
            };
            let host = std::fs::canonicalize(host)
                .with_context(|| format!("--image {s:?}: host file {host} does not exist"))?;
            out.map
                .entry(repository(repo).to_string())
                .or_default()
                .insert(path.to_string(), host);
        }
        Ok(out)
    }

    /// Run the images of this server image store in their own root
    /// filesystems.
    pub fn with_server_store(mut self, store: PathBuf) -> Images {
        self.server_store = Some(store);
        self
    }

    /// The root filesystem of `image`, when it is a server image of the
    /// store.
    pub fn root_filesystem(&self, image: &str) -> Option<PathBuf> {
        let store = self.server_store.as_ref()?;
        cnmysql_instance::server_image::resolve(store, image)
            .ok()
            .map(|i| i.root)
    }

    fn entries<'a>(&'a self, image: &str) -> impl Iterator<Item = (&'a String, &'a PathBuf)> {
        let repo = repository(image).to_string();
        self.map
            .iter()
            .filter(move |(r, _)| **r == repo || r.as_str() == "*")
            .flat_map(|(_, m)| m.iter())
    }

    /// The host file that stands for `program` in `image`, if any.
    pub fn resolve(&self, image: &str, program: &str) -> Option<PathBuf> {
        self.entries(image)
            .find(|(p, _)| p.as_str() == program)
            .map(|(_, h)| h.clone())
    }

    /// A directory of symlinks for the bare program names of `image`, to
    /// put first on PATH; None when it has none.
    pub fn bin_dir(&self, state: &Path, image: &str) -> anyhow::Result<Option<PathBuf>> {
        let names: Vec<(&String, &PathBuf)> = self
            .entries(image)
            .filter(|(p, _)| !p.contains('/'))
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        let dir = state
            .join("images")
            .join(repository(image).replace(['/', ':'], "_"))
            .join("bin");
        std::fs::create_dir_all(&dir)?;
        for (name, host) in names {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(host, &link)?;
        }
        Ok(Some(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_digests_are_not_part_of_the_repository() {
        assert_eq!(repository("ghcr.io/x/cnmysql:0.1.0"), "ghcr.io/x/cnmysql");
        assert_eq!(repository("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(repository("mariadb@sha256:abc"), "mariadb");
    }
}
