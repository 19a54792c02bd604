//! In-place upgrades of the instance manager (spec/operator-upgrades.txt):
//! receive a new executable, check it, put it over the manager's own binary
//! atomically, and re-exec — mysqld keeps running, and the new image adopts
//! it and keeps reading its log FIFO through the inherited descriptor.
//!
//! Before the exec the old image records, in the environment of the new one,
//! mysqld's PID (`CNMYSQL_ADOPT_MYSQLD_PID`) and the FIFO's descriptor
//! number (`CNMYSQL_LOG_FIFO_FD`), and clears close-on-exec on that
//! descriptor. A process keeps its PID across exec, so the adopted mysqld is
//! still its child and `waitpid` works as before. If the exec fails, the old
//! binary is put back and the old image goes on supervising.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::Digest;

use cnmysql_api::names::ADOPT_MYSQLD_PID_ENV;

use crate::config::InstanceConfig;

/// How long a re-exec waits for control API requests already being served.
pub const QUIESCE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);
/// Longest a new image holds its control API after adopting mysqld.
pub const ADOPT_HOLD: std::time::Duration = std::time::Duration::from_secs(3);
/// The descriptor number of the inherited log FIFO.
pub const LOG_FIFO_FD_ENV: &str = "CNMYSQL_LOG_FIFO_FD";
/// The manager's listening sockets handed to the next image
/// (`control=fd,probes=fd`): requests that arrive during the exec wait in
/// the backlog instead of being refused.
pub const LISTENERS_ENV: &str = "CNMYSQL_LISTENERS";

/// The largest executable accepted (the manager is ~30 MB).
pub const MAX_EXECUTABLE_BYTES: u64 = 512 * 1024 * 1024;

/// The longest the re-exec waits for its HTTP answer to be written.
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// After the answer's body was handed to the connection: time for the TLS
/// layer to encrypt and flush it before the exec closes the socket.
pub const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// Why an executable was refused (400) or could not be installed (500).
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// Check an executable on this instance's filesystem before it is
/// installed from there (air-gapped sites: copied onto the node, or on a
/// volume the Pod mounts): an absolute path to a regular file with an
/// execute bit, no larger than [`MAX_EXECUTABLE_BYTES`], hashing to
/// `sha256` when given. Its SHA-256.
pub async fn check_file(path: &str, sha256: Option<&str>) -> Result<String, InstallError> {
    let refuse =
        |why: String| InstallError::Refused(format!("{path}: {why}; nothing was replaced"));
    if !path.starts_with('/') {
        return Err(refuse("not an absolute path".into()));
    }
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| refuse(format!("cannot be read ({e})")))?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(refuse(format!(
            "not executable (mode {:o}): chmod +x it",
            meta.permissions().mode() & 0o7777
        )));
    }
    if meta.len() > MAX_EXECUTABLE_BYTES {
        return Err(refuse(format!("larger than {MAX_EXECUTABLE_BYTES} bytes")));
    }
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| refuse(format!("cannot be opened ({e})")))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        use tokio::io::AsyncReadExt;
        let n = file
            .read(&mut buf)
            .await
            .map_err(|e| refuse(format!("cannot be read ({e})")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let got = hex::encode(hasher.finalize());
    if let Some(want) = sha256.map(|w| w.trim().to_ascii_lowercase())
        && want != got
    {
        return Err(refuse(format!("its SHA-256 is {got}, not {want} as asked")));
    }
    Ok(got)
}

/// The file at `path` as a stream of chunks, for [`install`].
pub async fn file_stream(
    path: &str,
) -> std::io::Result<impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin> {
    let file = tokio::fs::File::open(path).await?;
    Ok(tokio_util::io::ReaderStream::with_capacity(
        file,
        256 * 1024,
    ))
}

/// Where the previous binary is kept until the new one has taken over.
pub fn previous_of(exe: &Path) -> PathBuf {
    let mut p = exe.as_os_str().to_owned();
    p.push(".previous");
    PathBuf::from(p)
}

/// Receive an executable whose SHA-256 must be `hash` and put it over
/// `exe`. Refused — with nothing on disk changed — when the hash is not a
/// SHA-256, the body is cut short, larger than [`MAX_EXECUTABLE_BYTES`] or
/// hashes differently. The replaced binary is kept as [`previous_of`] so a
/// failed exec can put it back.
pub async fn install<S, E>(exe: &Path, hash: &str, body: S) -> Result<(), InstallError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let want = hash.trim().to_ascii_lowercase();
    if want.len() != 64 || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(InstallError::Refused(format!(
            "the {} header must hold the SHA-256 of the executable (64 hex digits)",
            cnmysql_api::names::MANAGER_HASH_HEADER
        )));
    }
    let dir = exe
        .parent()
        .ok_or_else(|| InstallError::Failed(format!("{} has no directory", exe.display())))?;
    let tmp = dir.join(format!(
        ".{}.upload-{}",
        exe.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        InstallError::Failed(format!("{what} {}: {e}", tmp.display()))
    };
    let result = async {
        use tokio::io::AsyncWriteExt;
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| fail("cannot create", &e))?;
        let mut hasher = sha2::Sha256::new();
        let mut size = 0u64;
        let mut body = body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                InstallError::Refused(format!(
                    "the executable was cut short after {size} bytes: {e}"
                ))
            })?;
            size += chunk.len() as u64;
            if size > MAX_EXECUTABLE_BYTES {
                return Err(InstallError::Refused(format!(
                    "the executable is larger than {MAX_EXECUTABLE_BYTES} bytes"
                )));
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| fail("cannot write", &e))?;
        }
        let got = hex::encode(hasher.finalize());
        if got != want {
            return Err(InstallError::Refused(format!(
                "hash mismatch: the {size} bytes received hash to {got}, the header says {want}; nothing was replaced"
            )));
        }
        file.sync_all().await.map_err(|e| fail("cannot sync", &e))?;
        drop(file);
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail("cannot make executable", &e))?;
        let previous = previous_of(exe);
        let _ = std::fs::remove_file(&previous);
        std::fs::hard_link(exe, &previous)
            .map_err(|e| fail(&format!("cannot keep {} as", exe.display()), &e))?;
        std::fs::rename(&tmp, exe).map_err(|e| fail("cannot rename", &e))?;
        tracing::info!(bytes = size, hash = want, exe = %exe.display(), "new instance manager executable installed");
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Put the previous binary back (after a failed exec).
pub fn restore_previous(exe: &Path) {
    let previous = previous_of(exe);
    if previous.exists() {
        match std::fs::rename(&previous, exe) {
            Ok(()) => tracing::warn!(exe = %exe.display(), "the previous executable was put back"),
            Err(e) => tracing::error!(error = %e, "cannot put the previous executable back"),
        }
    }
}

/// Replace this process with `exe` (same arguments, same PID), handing it
/// mysqld and the log FIFO. Returns only if the exec failed; the process
/// then carries on as before.
pub fn reexec(
    exe: &Path,
    mysqld_pid: Option<u32>,
    log_fd: RawFd,
    listeners: &[(&str, RawFd)],
) -> anyhow::Error {
    // The log FIFO and the listening sockets (control API, probes) pass
    // to the next image.
    let set_inheritable = |on: bool| -> nix::Result<()> {
        crate::inherit::set_inheritable(log_fd, on)?;
        for (_, fd) in listeners {
            crate::inherit::set_inheritable(*fd, on)?;
        }
        Ok(())
    };
    let build = || -> anyhow::Result<(CString, Vec<CString>, Vec<CString>)> {
        let c = |s: &std::ffi::OsStr| CString::new(s.as_bytes()).map_err(anyhow::Error::from);
        let path = c(exe.as_os_str())?;
        let args = std::env::args_os()
            .map(|a| c(&a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut env: Vec<CString> = std::env::vars_os()
            .filter(|(k, _)| {
                k != ADOPT_MYSQLD_PID_ENV && k != LOG_FIFO_FD_ENV && k != LISTENERS_ENV
            })
            .map(|(k, v)| {
                let mut kv = k;
                kv.push("=");
                kv.push(v);
                c(&kv)
            })
            .collect::<anyhow::Result<_>>()?;
        if let Some(pid) = mysqld_pid {
            env.push(CString::new(format!("{ADOPT_MYSQLD_PID_ENV}={pid}"))?);
        }
        env.push(CString::new(format!("{LOG_FIFO_FD_ENV}={log_fd}"))?);
        env.push(CString::new(format!(
            "{LISTENERS_ENV}={}",
            crate::inherit::encode(listeners.iter().copied())
        ))?);
        Ok((path, args, env))
    };
    let (path, args, env) = match build() {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Err(e) = set_inheritable(true) {
        let _ = set_inheritable(false);
        return anyhow::anyhow!("cannot pass the log FIFO and listeners on: {e}");
    }
    tracing::info!(exe = %exe.display(), mysqld_pid, log_fd, "re-executing the instance manager; mysqld keeps running");
    let err = match nix::unistd::execve(&path, &args, &env) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    let _ = set_inheritable(false);
    anyhow::anyhow!("cannot execute {}: {err}", exe.display())
}

/// What a re-exec'd manager takes over from its previous image.
#[derive(Debug, Default)]
pub struct Adopted {
    /// The running mysqld of this instance, still this process's child.
    pub mysqld_pid: Option<u32>,
    /// The read side of the log FIFO, open since before the exec.
    pub log_fifo: Option<OwnedFd>,
}

/// Take over what the previous image handed on, checking each piece: a
/// PID that is not this instance's mysqld, or not this process's child, is
/// not adopted (a fresh start stops a leftover server instead); a
/// descriptor that is not a FIFO is not used.
pub fn adopt(cfg: &InstanceConfig) -> Adopted {
    let mut out = Adopted::default();
    if let Some(fd) = std::env::var(LOG_FIFO_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<RawFd>().ok())
    {
        // SAFETY: fstat on a number only reads its metadata.
        let is_fifo = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO);
        if is_fifo {
            // SAFETY: the previous image left this descriptor open for us
            // and nothing else in this process knows of it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let _ = nix::fcntl::fcntl(
                &owned,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            );
            out.log_fifo = Some(owned);
        } else {
            tracing::warn!(
                fd,
                "the inherited log descriptor is not a FIFO; opening the FIFO anew"
            );
        }
    }
    if let Some(pid) = std::env::var(ADOPT_MYSQLD_PID_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&cfg.mycnf().display().to_string()))
            .unwrap_or(false);
        let child = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse::<u32>()
                    .ok()
            })
            == Some(std::process::id());
        if ours && child && crate::mysqld::is_alive(pid) {
            tracing::info!(pid, "adopting the running mysqld");
            out.mysqld_pid = Some(pid);
        } else {
            tracing::warn!(
                pid,
                ours,
                child,
                "not adopting: not this instance's running mysqld"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(
        parts: Vec<Result<&'static [u8], &'static str>>,
    ) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
        futures::stream::iter(
            parts
                .into_iter()
                .map(|p| p.map(Bytes::from_static).map_err(str::to_string)),
        )
    }

    fn sha(b: &[u8]) -> String {
        hex::encode(sha2::Sha256::digest(b))
    }

    #[tokio::test]
    async fn a_matching_executable_replaces_the_binary_and_keeps_the_previous() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("manager");
        std::fs::write(&exe, b"old").unwrap();
        install(
            &exe,
            &sha(b"new one"),
            stream(vec![Ok(b"new "), Ok(b"one")]),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(&exe).unwrap(), b"new one");
        assert_eq!(std::fs::read(previous_of(&exe)).unwrap(), b"old");
        let mode = std::fs::metadata(&exe).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        restore_previous(&exe);
        assert_eq!(std::fs::read(&exe).unwrap(), b"old");
    }

    #[tokio::test]
    async fn a_wrong_hash_a_cut_body_or_a_bad_header_change_nothing() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("manager");
        std::fs::write(&exe, b"old").unwrap();
        let r = install(&exe, &sha(b"other"), stream(vec![Ok(b"new")])).await;
        assert!(
            matches!(&r, Err(InstallError::Refused(m)) if m.contains("hash mismatch")),
            "{r:?}"
        );
        let r = install(
            &exe,
            &sha(b"new"),
            stream(vec![Ok(b"ne"), Err("connection reset")]),
        )
        .await;
        assert!(
            matches!(&r, Err(InstallError::Refused(m)) if m.contains("cut short")),
            "{r:?}"
        );
        let r = install(&exe, "abc", stream(vec![Ok(b"new")])).await;
        assert!(
            matches!(&r, Err(InstallError::Refused(m)) if m.contains("64 hex")),
            "{r:?}"
        );
        assert_eq!(std::fs::read(&exe).unwrap(), b"old");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_exec_returns_and_leaves_the_descriptor_close_on_exec() {
        let d = tempfile::tempdir().unwrap();
        let bogus = d.path().join("not-a-program");
        std::fs::write(&bogus, b"plain text").unwrap();
        std::fs::set_permissions(&bogus, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = std::fs::File::open(d.path()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let lfd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let e = reexec(&bogus, None, fd, &[("control", lfd)]);
        assert!(e.to_string().contains("cannot execute"), "{e}");
        let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        let flags = nix::fcntl::fcntl(&l, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(
            flags & libc::FD_CLOEXEC,
            0,
            "the listener is close-on-exec again"
        );
    }
}
