//! The container shim: one per running container. The node starts it as
//! `cnmysql-node shim SPEC.json`; it enters a private mount namespace and a
//! new PID namespace, bind-mounts the Pod's volumes at their container
//! paths, and starts the container's command as PID 1 of that namespace
//! (with a fresh `/proc`, the Pod's user and groups and working directory).
//!
//! A container of a server image runs inside that image's root filesystem:
//! an overlay of the image with a fresh writable layer, the Pod's volumes
//! mounted at their paths in it, the host's `/dev` and `/sys`, then `chroot`
//! into it, as a container runtime would.
//!
//! It forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to that PID 1 (which,
//! being an init process, only receives the signals it handles, as in a
//! real container), exits with its exit status (128 + signal when it was
//! killed), and writes its host PID to `pid_file` so tests can kill it.
//! When the shim dies, PID 1 gets SIGKILL, and with it every process of
//! the namespace.
//!
//! It must stay single-threaded: `unshare(CLONE_NEWNS)` refuses a
//! multi-threaded caller.

use std::ffi::CString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// What to run, and how.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Spec {
    /// The program (a host path) and its arguments.
    pub argv: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside the container (default `/`).
    pub cwd: Option<String>,
    /// Volumes: host directory or file → container path.
    pub mounts: Vec<MountSpec>,
    /// Run as this user and group (host ids); root when absent.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub groups: Vec<u32>,
    /// Where to write PID 1's host PID.
    pub pid_file: PathBuf,
    /// Run inside this root filesystem (a server image); none: the host's.
    #[serde(default)]
    pub root: Option<RootSpec>,
}

/// A root filesystem for the container: `image` (read only, shared) under
/// a writable layer in `layer` (discarded at each start).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RootSpec {
    pub image: PathBuf,
    pub layer: PathBuf,
}

/// Where `path` of the container is under `root`, following the image's
/// symbolic links as the container would see them (an absolute link such
/// as Debian's `/var/run -> /run` points inside the root, not at the
/// host's).
fn in_root(root: &Path, path: &Path) -> anyhow::Result<PathBuf> {
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let here = root.join(&at).join(&name);
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                anyhow::ensure!(links <= 40, "too many symbolic links in {}", path.display());
                let target = std::fs::read_link(&here)?;
                if target.is_absolute() {
                    at = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        std::path::Component::Normal(n) => pending.push(n.to_os_string()),
                        std::path::Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ if name == ".." => {
                at.pop();
            }
            _ => at.push(name),
        }
    }
    Ok(root.join(at))
}

/// Mount the overlay root of `r` and the host's `/dev` and `/sys` in it;
/// returns where it is mounted.
fn mount_root(r: &RootSpec) -> anyhow::Result<PathBuf> {
    let _ = std::fs::remove_dir_all(&r.layer);
    let (upper, work, merged) = (
        r.layer.join("upper"),
        r.layer.join("work"),
        r.layer.join("merged"),
    );
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        r.image.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        &merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .with_context(|| format!("mounting the image {} as the root", r.image.display()))?;
    for dir in ["/dev", "/sys"] {
        bind(&MountSpec {
            source: PathBuf::from(dir),
            target: merged.join(dir.trim_start_matches('/')),
            read_only: false,
        })?;
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_the_root_follow_its_own_links() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("run")).unwrap();
        std::fs::create_dir_all(r.join("usr/lib")).unwrap();
        std::fs::create_dir_all(r.join("var")).unwrap();
        std::os::unix::fs::symlink("/run", r.join("var/run")).unwrap();
        std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
        assert_eq!(
            in_root(r, Path::new("/var/run/secrets/kubernetes.io")).unwrap(),
            r.join("run/secrets/kubernetes.io")
        );
        assert_eq!(
            in_root(r, Path::new("/lib/x")).unwrap(),
            r.join("usr/lib/x")
        );
        assert_eq!(
            in_root(r, Path::new("/controller")).unwrap(),
            r.join("controller")
        );
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountSpec {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

fn forwarded() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGCHLD,
    ] {
        set.add(s);
    }
    set
}

fn bind(m: &MountSpec) -> anyhow::Result<()> {
    let is_dir = m.source.is_dir();
    if is_dir {
        std::fs::create_dir_all(&m.target)
            .with_context(|| format!("creating mount point {}", m.target.display()))?;
    } else {
        if let Some(p) = m.target.parent() {
            std::fs::create_dir_all(p)?;
        }
        if !m.target.exists() {
            std::fs::File::create(&m.target)
                .with_context(|| format!("creating mount point {}", m.target.display()))?;
        }
    }
    mount(
        Some(&m.source),
        &m.target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .with_context(|| {
        format!(
            "bind-mounting {} at {}",
            m.source.display(),
            m.target.display()
        )
    })?;
    if m.read_only {
        mount(
            None::<&str>,
            &m.target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_REC,
            None::<&str>,
        )
        .with_context(|| format!("making {} read-only", m.target.display()))?;
    }
    Ok(())
}

/// Run the shim; never returns.
pub fn main(spec_path: &Path) -> ! {
    match run(spec_path) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("cnmysql-node shim: {e:#}");
            std::process::exit(128)
        }
    }
}

fn run(spec_path: &Path) -> anyhow::Result<i32> {
    let spec: Spec = serde_json::from_slice(
        &std::fs::read(spec_path).with_context(|| format!("reading {}", spec_path.display()))?,
    )?;
    anyhow::ensure!(!spec.argv.is_empty(), "the container has no command");
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .context("unshare(mount, pid): the node must run as root")?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private")?;
    let root = spec.root.as_ref().map(mount_root).transpose()?;
    let mut mounts = spec.mounts.clone();
    mounts.sort_by_key(|m| m.target.components().count());
    for m in &mut mounts {
        if let Some(root) = &root {
            m.target = in_root(root, &m.target)?;
        }
        bind(m)?;
    }
    let root = root
        .map(|r| CString::new(r.into_os_string().into_encoded_bytes()))
        .transpose()?;

    let set = forwarded();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;

    let cwd = CString::new(spec.cwd.clone().unwrap_or_else(|| "/".into()))?;
    let (uid, gid, groups) = (spec.uid, spec.gid, spec.groups.clone());
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    unsafe {
        cmd.pre_exec(move || {
            let all = forwarded();
            sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&all), None)?;
            if let Some(root) = &root {
                nix::unistd::chroot(root.as_c_str())?;
                nix::unistd::chdir(c"/")?;
            }
            // PID 1 of the new namespace: a /proc of its own.
            mount(
                Some("proc"),
                "/proc",
                Some("proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )?;
            if let Some(g) = gid {
                let mut all: Vec<nix::unistd::Gid> = groups
                    .iter()
                    .map(|g| nix::unistd::Gid::from_raw(*g))
                    .collect();
                all.push(nix::unistd::Gid::from_raw(g));
                nix::unistd::setgroups(&all)?;
                nix::unistd::setgid(nix::unistd::Gid::from_raw(g))?;
            }
            if let Some(u) = uid {
                nix::unistd::setuid(nix::unistd::Uid::from_raw(u))?;
            }
            // After the change of user, which clears it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            nix::unistd::chdir(cwd.as_c_str())?;
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", spec.argv[0]))?;
    let pid = Pid::from_raw(child.id() as i32);
    std::fs::write(&spec.pid_file, pid.to_string())?;
    loop {
        let sig = set.wait()?;
        if sig == Signal::SIGCHLD {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG))? {
                WaitStatus::Exited(_, code) => return Ok(code),
                WaitStatus::Signaled(_, s, _) => return Ok(128 + s as i32),
                _ => continue,
            }
        }
        let _ = kill(pid, sig);
    }
}
