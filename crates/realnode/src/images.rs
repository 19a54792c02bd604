//! Images for the node, made here (no registry is reachable): OCI image
//! archives assembled with umoci (Debian's package) from a root filesystem
//! or a single executable, cached by content under
//! `~/.cache/cnmysql/oci/`, and imported into the node's containerd under
//! the names the manifests use.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use sha2::Digest as _;

use crate::cmd::run;

/// What an image is made of.
#[derive(Clone, Debug)]
pub enum Source {
    /// A root filesystem (a server image of `scripts/images`).
    Rootfs(PathBuf),
    /// One executable placed at a path, nothing else.
    Executable { file: PathBuf, at: String },
}

/// One image to make and import.
#[derive(Clone, Debug)]
pub struct Image {
    /// `repo:tag`, as Pods name it.
    pub name: String,
    pub source: Source,
    pub entrypoint: Vec<String>,
    pub user: Option<String>,
}

fn cache_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("cnmysql/oci")
}

fn file_digest(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

impl Image {
    /// What decides the archive's content.
    fn key(&self) -> anyhow::Result<String> {
        let what = match &self.source {
            Source::Rootfs(dir) => {
                // scripts/images writes image.json beside rootfs/ for each build.
                let manifest = dir.parent().map(|p| p.join("image.json"));
                let stamp = manifest
                    .filter(|m| m.is_file())
                    .map(|m| std::fs::read_to_string(m).unwrap_or_default())
                    .unwrap_or_else(|| dir.display().to_string());
                format!("rootfs {} {stamp}", dir.display())
            }
            Source::Executable { file, at } => format!("exe {at} {}", file_digest(file)?),
        };
        // The way archives are made: a change of it makes them anew.
        const FORMAT: u32 = 2;
        let all = format!(
            "{FORMAT} {} {what} {:?} {:?}",
            self.name, self.entrypoint, self.user
        );
        Ok(hex::encode(sha2::Sha256::digest(all.as_bytes()))[..16].to_string())
    }

    /// Whether its source is a root filesystem that no longer exists.
    pub fn vanished(&self) -> bool {
        matches!(&self.source, Source::Rootfs(dir) if !dir.is_dir())
    }

    /// The image's OCI archive, made unless the cache has it.
    pub fn archive(&self) -> anyhow::Result<PathBuf> {
        let dir = cache_dir();
        std::fs::create_dir_all(&dir)?;
        let safe: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let out = dir.join(format!("{safe}-{}.tar", self.key()?));
        if out.is_file() {
            return Ok(out);
        }
        let work = tempfile_dir(&dir)?;
        let made = self.assemble(&work, &out);
        let _ = std::fs::remove_dir_all(&work);
        made.with_context(|| format!("making the image {}", self.name))?;
        Ok(out)
    }

    fn assemble(&self, work: &Path, out: &Path) -> anyhow::Result<()> {
        if crate::containerd::which("umoci").is_none() {
            bail!("umoci is not installed: apt-get install umoci (scripts/setup --kube does it)");
        }
        let tag = self
            .name
            .rsplit_once(':')
            .map(|(_, t)| t)
            .unwrap_or("latest");
        let layout = work.join("layout");
        let l = layout.display().to_string();
        let image = format!("{l}:{tag}");
        run("umoci", &["init", "--layout", &l])?;
        run("umoci", &["new", "--image", &image])?;
        match &self.source {
            Source::Rootfs(dir) => {
                if !dir.is_dir() {
                    bail!(
                        "{} is not a directory (build it with scripts/images)",
                        dir.display()
                    );
                }
                run(
                    "umoci",
                    &["insert", "--image", &image, &dir.display().to_string(), "/"],
                )?;
            }
            Source::Executable { file, at } => {
                let rootfs = work.join("rootfs");
                executable_rootfs(&rootfs, file, at)?;
                run(
                    "umoci",
                    &[
                        "insert",
                        "--image",
                        &image,
                        &rootfs.display().to_string(),
                        "/",
                    ],
                )?;
            }
        }
        let mut config = vec![
            "config".to_string(),
            "--image".into(),
            image.clone(),
            "--config.env".into(),
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ];
        for e in &self.entrypoint {
            config.push("--config.entrypoint".into());
            config.push(e.clone());
        }
        if let Some(u) = &self.user {
            config.push("--config.user".into());
            config.push(u.clone());
        }
        let args: Vec<&str> = config.iter().map(String::as_str).collect();
        run("umoci", &args)?;
        run("umoci", &["gc", "--layout", &l])?;
        // Written inside this maker's own work directory (on the cache's
        // filesystem) and renamed into place whole: two tests making the
        // same image at once each rename a complete archive, where a
        // shared partial file had one rename the other's half-written tar
        // (seen on a fresh machine: a digest missing at import).
        let partial = work.join("image.tar");
        run(
            "tar",
            &["-C", &l, "-cf", &partial.display().to_string(), "."],
        )?;
        std::fs::rename(&partial, out)?;
        Ok(())
    }
}

/// A root filesystem holding one executable at `at` and what it needs to
/// run: the shared libraries `ldd` names (the C library for a glibc
/// build, as distroless' `cc` image has it), a passwd file naming the
/// unprivileged user 65532, and a world-writable /tmp.
fn executable_rootfs(rootfs: &Path, file: &Path, at: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let place = |inside: &str, from: &Path| -> anyhow::Result<()> {
        let to = rootfs.join(inside.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().context("a path inside the image")?)?;
        std::fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
        Ok(())
    };
    place(at, file)?;
    // A static executable: ldd says so and fails.
    let libs = std::process::Command::new("ldd").arg(file).output()?;
    for line in String::from_utf8_lossy(&libs.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            // The library at the path the loader looks for, its target copied.
            place(p, &std::fs::canonicalize(p)?)?;
        }
    }
    let etc = rootfs.join("etc");
    std::fs::create_dir_all(&etc)?;
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )?;
    std::fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n")?;
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
    Ok(())
}

fn tempfile_dir(parent: &Path) -> anyhow::Result<PathBuf> {
    let p = parent.join(format!("work-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The sandbox image: a static `pause` compiled from this crate's pause.c.
pub fn pause() -> anyhow::Result<Image> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)?;
    let src = dir.join("pause.c");
    std::fs::write(&src, include_str!("pause.c"))?;
    let bin = dir.join("pause");
    if !bin.is_file() {
        run(
            "cc",
            &["-static", "-Os", "-o", &bin.display().to_string(), &src.display().to_string()],
        )
        .context("compiling pause.c (needs a C compiler and the static C library: apt-get install gcc libc6-dev)")?;
    }
    Ok(Image {
        name: crate::containerd::PAUSE_IMAGE.into(),
        source: Source::Executable {
            file: bin,
            at: "/pause".into(),
        },
        entrypoint: vec!["/pause".into()],
        user: None,
    })
}

/// The operator image as `deploy/operator.yaml` names it: the release
/// binary at /usr/local/bin/cnmysql (deploy/Containerfile), user 65532.
pub fn operator(name: &str, cnmysql: &Path) -> Image {
    Image {
        name: name.into(),
        source: Source::Executable {
            file: cnmysql.to_path_buf(),
            at: "/usr/local/bin/cnmysql".into(),
        },
        entrypoint: vec!["/usr/local/bin/cnmysql".into()],
        user: Some("65532:65532".into()),
    }
}

/// A server image from the image store of `scripts/images`
/// (`<store>/<repo>/<tag>/rootfs`), named `name`; user 999 as the
/// Debian-based server images run.
pub fn server(name: &str, store: &Path, store_ref: &str) -> anyhow::Result<Image> {
    let (repo, tag) = store_ref
        .split_once(':')
        .with_context(|| format!("{store_ref}: expected NAME:TAG"))?;
    let rootfs = store.join(repo).join(tag).join("rootfs");
    if !rootfs.is_dir() {
        bail!(
            "the server image {store_ref} is not built ({} is missing): run scripts/images {store_ref}",
            rootfs.display()
        );
    }
    Ok(Image {
        name: name.into(),
        source: Source::Rootfs(rootfs),
        entrypoint: vec![],
        user: Some("999:999".into()),
    })
}

/// The server image store of `scripts/images`.
pub fn store() -> PathBuf {
    std::env::var_os("CNMYSQL_IMAGE_STORE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            dirs::home_dir()
                .unwrap_or_else(|| PathBuf::from("/root"))
                .join(".cache/cnmysql/images")
        })
}

/// Every server image the store has built, under the names Clusters use
/// for them: `docker.io/library/mariadb:<tag>` for each MariaDB build
/// (and `:10.11`, the operator's default MariaDB image, for the newest
/// 10.11), `docker.io/library/mysql:<tag>` for MySQL.
pub fn from_store(store: &Path) -> Vec<Image> {
    let mut out = Vec::new();
    let mut newest_1011: Option<String> = None;
    for repo in ["mariadb", "mysql"] {
        let Ok(tags) = std::fs::read_dir(store.join(repo)) else {
            continue;
        };
        let mut tags: Vec<String> = tags
            .flatten()
            .filter(|e| e.path().join("image.json").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        tags.sort();
        for tag in tags {
            let store_ref = format!("{repo}:{tag}");
            if let Ok(i) = server(&format!("docker.io/library/{store_ref}"), store, &store_ref) {
                out.push(i);
            }
            if repo == "mariadb" && tag.starts_with("10.11.") {
                newest_1011 = Some(tag);
            }
        }
    }
    if let Some(tag) = newest_1011
        && let Ok(i) = server(
            "docker.io/library/mariadb:10.11",
            store,
            &format!("mariadb:{tag}"),
        )
    {
        out.push(i);
    }
    out
}
