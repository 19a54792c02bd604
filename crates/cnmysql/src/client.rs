//! `cnmysql instance client`: a SQL session on one instance as its
//! administrator, through the server's own client over the socket. What
//! `kubectl cnmsql mysql` runs in the instance's container (configured from
//! the Pod's environment), and locally from the instance's configuration.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use cnmysql_api::Flavor;
use cnmysql_instance::config::{Programs, render_client_cnf};

/// Where the client finds the server and the password.
struct Session {
    socket: PathBuf,
    admin_password: PathBuf,
    /// How to start a program of the server (inside its image, locally).
    programs: Programs,
    client: PathBuf,
}

fn local(config: &Path) -> anyhow::Result<Session> {
    let cfg = cnmysql_instance::InstanceConfig::load(config)?;
    let client = cfg.programs.client.clone().with_context(|| {
        format!(
            "no client program (mariadb or mysql) beside the server of {}",
            cfg.instance
        )
    })?;
    Ok(Session {
        socket: cfg.socket(),
        admin_password: cfg.secrets.admin_password,
        programs: cfg.programs,
        client,
    })
}

/// In an instance Pod: the directories its environment names, and the
/// client beside whichever server the image holds.
fn in_pod() -> anyhow::Result<Session> {
    let dir = |var: &str| {
        std::env::var_os(var).map(PathBuf::from).with_context(|| {
            format!("{var} is not set: run this in an instance's mysql container, or pass --config")
        })
    };
    let run_dir = dir("CNMYSQL_RUN")?;
    let secrets = dir("CNMYSQL_SECRETS")?;
    let (programs, client) = [Flavor::Mariadb, Flavor::Mysql]
        .into_iter()
        .find_map(|f| {
            let p = Programs::discover(f).ok()?;
            let c = p.client.clone()?;
            Some((p, c))
        })
        .context("no client program (mariadb or mysql) in this image")?;
    Ok(Session {
        socket: run_dir.join("mysqld.sock"),
        admin_password: secrets.join("admin-password"),
        programs,
        client,
    })
}

/// Replace this process with the client; returns only on failure.
pub(crate) fn exec(config: Option<&Path>, args: &[String]) -> anyhow::Result<()> {
    let s = match config {
        Some(c) => local(c)?,
        None => in_pod()?,
    };
    let password = std::fs::read_to_string(&s.admin_password)
        .with_context(|| format!("reading {}", s.admin_password.display()))?;
    // The options reach the client through a pipe it reads as a file: the
    // password is never on a command line, and no file holds it after
    // the session.
    let options = options_pipe(&render_client_cnf(&s.socket, password.trim()))?;
    let err = s
        .programs
        .command(&s.client)
        .arg(format!("--defaults-extra-file=/dev/fd/{options}"))
        .args(args)
        .exec();
    Err(anyhow::anyhow!("running {}: {err}", s.client.display()))
}

/// A pipe holding `text`, its read end open across `exec`: the number of
/// that descriptor. The text must fit the pipe's buffer (an option file
/// does, by far).
fn options_pipe(text: &str) -> anyhow::Result<i32> {
    use std::io::Write as _;
    use std::os::fd::{IntoRawFd as _, OwnedFd};
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().context("making a pipe")?;
    std::fs::File::from(write)
        .write_all(text.as_bytes())
        .context("writing the client's options")?;
    let fd = read.into_raw_fd();
    nix::fcntl::fcntl(
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .context("keeping the options open for the client")?;
    Ok(fd)
}
