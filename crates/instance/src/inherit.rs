//! Descriptors handed from one image of a process to the next across
//! `exec` (same PID): the instance manager's listening sockets on an
//! in-place upgrade, the local control plane's endpoints on `cnmysql local
//! upgrade`. A listening socket that survives the exec never refuses a
//! connection: clients that arrive meanwhile wait in its backlog.
//!
//! Everything is opened close-on-exec; only while an exec is attempted are
//! the handed descriptors made inheritable, and the next image marks them
//! close-on-exec again as soon as it takes them, so no child it starts
//! later holds them.

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};

/// Make `fd` survive (`true`) or not survive (`false`) an exec.
pub fn set_inheritable(fd: RawFd, on: bool) -> nix::Result<()> {
    let flags = if on {
        FdFlag::empty()
    } else {
        FdFlag::FD_CLOEXEC
    };
    // SAFETY: only the flags of a descriptor the caller owns change.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    fcntl(fd, FcntlArg::F_SETFD(flags)).map(|_| ())
}

/// Take ownership of a descriptor the previous image handed on (named in
/// the environment variable `from`), closed on exec again.
pub fn take(fd: RawFd, from: &str) -> anyhow::Result<OwnedFd> {
    // SAFETY: F_GETFD only asks whether the number is an open descriptor.
    if fcntl(unsafe { BorrowedFd::borrow_raw(fd) }, FcntlArg::F_GETFD).is_err() {
        anyhow::bail!("descriptor {fd} named in {from} is not open");
    }
    set_inheritable(fd, false)?;
    // SAFETY: the previous image handed this descriptor to this process and
    // nothing else here owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `name=fd,name=fd`, as handed over in one environment variable.
pub fn encode<'a>(fds: impl IntoIterator<Item = (&'a str, RawFd)>) -> String {
    fds.into_iter()
        .map(|(n, fd)| format!("{n}={fd}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The named descriptors in the environment variable `var`, each taken
/// (see [`take`]); the variable is read once per process image.
pub fn take_all(var: &str) -> std::collections::BTreeMap<String, OwnedFd> {
    let mut out = std::collections::BTreeMap::new();
    for kv in std::env::var(var).unwrap_or_default().split(',') {
        let Some((name, fd)) = kv.split_once('=') else {
            continue;
        };
        let Ok(fd) = fd.parse::<RawFd>() else {
            tracing::warn!(var, entry = kv, "not a descriptor number; ignored");
            continue;
        };
        match take(fd, var) {
            Ok(owned) => {
                out.insert(name.to_string(), owned);
            }
            Err(e) => tracing::warn!(error = %e, "an inherited descriptor is missing"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn descriptors_are_close_on_exec_except_while_handed_over() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = l.as_raw_fd();
        let cloexec = || {
            let fl = fcntl(&l, FcntlArg::F_GETFD).unwrap();
            FdFlag::from_bits_truncate(fl).contains(FdFlag::FD_CLOEXEC)
        };
        assert!(cloexec());
        set_inheritable(fd, true).unwrap();
        assert!(!cloexec());
        assert_eq!(
            encode([("control", fd), ("probes", 9)]),
            format!("control={fd},probes=9")
        );
        let err = take(987_654, "X").unwrap_err().to_string();
        assert!(err.contains("987654") && err.contains("X"), "{err}");
        let owned = take(
            l.try_clone()
                .map(std::os::fd::IntoRawFd::into_raw_fd)
                .unwrap(),
            "X",
        )
        .unwrap();
        assert!(
            FdFlag::from_bits_truncate(fcntl(&owned, FcntlArg::F_GETFD).unwrap())
                .contains(FdFlag::FD_CLOEXEC)
        );
    }
}
