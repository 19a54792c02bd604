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
    run_dir: PathBuf,
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
        run_dir: cfg.run_dir,
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
        run_dir,
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
    let cnf = s.run_dir.join("client.cnf");
    cnmysql_tls::write_private(&cnf, &render_client_cnf(&s.socket, password.trim()), true)
        .with_context(|| format!("writing {}", cnf.display()))?;
    let err = s
        .programs
        .command(&s.client)
        .arg(format!("--defaults-extra-file={}", cnf.display()))
        .args(args)
        .exec();
    Err(anyhow::anyhow!("running {}: {err}", s.client.display()))
}
