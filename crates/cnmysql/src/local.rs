//! `cnmysql local …`: a whole cluster on this machine, through
//! `cnmysql-local`.

use std::path::Path;
use std::time::Duration;

use crate::backup_view::say_taken;
use crate::cli::{LocalCommand, Output, Target};
use crate::log_view::follow_logs;
use crate::logs::init_json_logs;
use crate::reinit;
use crate::shared_verbs::{Switch, Toggle};

pub(crate) async fn run(command: LocalCommand) -> anyhow::Result<()> {
    match command {
        LocalCommand::Up {
            file,
            state_dir,
            port_base,
            detach,
            wait_timeout,
        } => {
            if std::env::var_os(cnmysql_local::DETACHED_ENV).is_some() {
                init_json_logs();
            }
            cnmysql_local::up(cnmysql_local::UpOptions {
                manifest: file,
                state_dir,
                port_base,
                detach,
                wait_timeout: Duration::from_secs(wait_timeout),
            })
            .await
        }
        LocalCommand::Apply { file, state_dir } => {
            let changed = cnmysql_local::apply(&file, state_dir.as_deref())?;
            if changed.is_empty() {
                println!("unchanged");
            }
            for c in changed {
                println!("configured: {c}");
            }
            Ok(())
        }
        LocalCommand::Annotate {
            args,
            overwrite,
            state_dir,
        } => annotate(&args, overwrite, state_dir.as_deref()),
        LocalCommand::Status { target, output } => {
            let dir = target.dir()?;
            let report = cnmysql_local::status_report(&dir).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                Output::Table => print!("{}", cnmysql_local::render_status(&report)),
            }
            Ok(())
        }
        LocalCommand::Promote { member } => {
            let (dir, instance) = member.resolve()?;
            cnmysql_local::promote(&dir, &instance, true).await
        }
        LocalCommand::Fence { mode, member } => {
            let (dir, instance) = member.resolve()?;
            let f = cnmysql_local::fence(&dir, &instance, mode == "on")?;
            for line in f.report() {
                eprintln!("{line}");
            }
            Ok(())
        }
        LocalCommand::Upgrade {
            target,
            no_wait,
            wait_timeout,
        } => {
            let wait = (!no_wait).then(|| Duration::from_secs(wait_timeout));
            cnmysql_local::upgrade(&target.dir()?, wait).await
        }
        LocalCommand::RestartInplace { member } => {
            let (dir, instance) = member.resolve()?;
            cnmysql_local::restart_inplace(&dir, &instance).await
        }
        LocalCommand::Reinit {
            member,
            no_wait,
            wait_timeout,
        } => {
            let (dir, instance) = member.resolve()?;
            cnmysql_local::reinit::request_reinit(&dir, &instance)?;
            if no_wait {
                return Ok(());
            }
            reinit::follow(Duration::from_secs(wait_timeout), &instance, || async {
                dir.read_status()
            })
            .await
        }
        LocalCommand::Backup {
            target,
            backup_target,
        } => {
            let t = cnmysql_local::backup(&target.dir()?, backup_target.target(), |line| {
                eprintln!("{line}")
            })
            .await?;
            say_taken(&t);
            Ok(())
        }
        LocalCommand::Backups { target, output } => list_backups(target, output).await,
        LocalCommand::Events { target, output } => events(target, output),
        LocalCommand::Logs {
            target,
            instance,
            options,
        } => follow_logs(target.dir()?, instance, &options).await,
        LocalCommand::Hibernate { args, state_dir } => {
            local_switch(state_dir, &args, Switch::Hibernation).await
        }
        LocalCommand::Maintenance { args, state_dir } => {
            local_switch(state_dir, &args, Switch::Maintenance).await
        }
        LocalCommand::Mysql { args, state_dir } => {
            let t = crate::plugin::PluginTarget::local(state_dir);
            crate::plugin::mysql(&t, &args.cluster, args.instance, args.replica, &args.args).await
        }
        LocalCommand::Report { args, state_dir } => {
            let t = crate::plugin::PluginTarget::local(state_dir);
            let tail = args.logs.then_some(args.tail);
            crate::plugin::report(&t, &args.cluster, args.file, tail).await
        }
        LocalCommand::Down { target } => cnmysql_local::down(&target.dir()?),
        LocalCommand::Destroy { target } => cnmysql_local::destroy(&target.dir()?),
    }
}

/// `cnmysql local annotate CLUSTER [INSTANCE] KEY=VALUE|KEY- …`.
fn annotate(args: &[String], overwrite: bool, state_dir: Option<&Path>) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.len() >= 2,
        "nothing to annotate: give CLUSTER [INSTANCE] then KEY=VALUE to set or KEY- to remove"
    );
    let cluster = args[0].clone();
    let rest = &args[1..];
    let (instance, changes) = match rest.first() {
        Some(a) if !a.contains('=') && !a.ends_with('-') => (Some(a.clone()), &rest[1..]),
        _ => (None, rest),
    };
    anyhow::ensure!(
        !changes.is_empty(),
        "nothing to annotate: give KEY=VALUE to set or KEY- to remove"
    );
    let changes = changes
        .iter()
        .map(|c| cnmysql_local::annotations::parse_change(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = cnmysql_local::existing_state_dir(state_dir, Some(&cluster))?;
    println!(
        "{}",
        cnmysql_local::annotations::annotate(&dir, instance.as_deref(), &changes, overwrite)?
    );
    Ok(())
}

/// `cnmysql local backups`: the base backups in the object store.
async fn list_backups(target: Target, output: Output) -> anyhow::Result<()> {
    let dir = target.dir()?;
    let cluster = dir.load_cluster()?;
    let dest = cnmysql_local::backup_destination(&cluster)?;
    let list = cnmysql_backup::base_backup::list(&dest).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&list)?),
        Output::Table => {
            println!(
                "{:<18}  {:<9}  {:<10}  {:<20}  {:>12}  {:>12}  GTID",
                "ID", "PHASE", "INSTANCE", "STOPPED", "BYTES", "STORED"
            );
            for m in &list {
                println!(
                    "{:<18}  {:<9}  {:<10}  {:<20}  {:>12}  {:>12}  {}",
                    m.record.id,
                    m.record.phase,
                    m.record.instance,
                    m.record
                        .stopped_at
                        .get(..19)
                        .unwrap_or(&m.record.stopped_at),
                    m.record.raw_bytes,
                    m.record.stored_bytes,
                    if m.completed() {
                        &m.record.gtid
                    } else {
                        &m.record.error
                    }
                );
            }
        }
    }
    Ok(())
}

/// `cnmysql local events`: the latest events, newest last.
fn events(target: Target, output: Output) -> anyhow::Result<()> {
    let dir = target.dir()?;
    for e in dir.events(200) {
        match output {
            Output::Json => println!("{e}"),
            Output::Table => println!(
                "{}  {:<7}  {:<22}  {:<20}  {}",
                e["time"].as_str().unwrap_or(""),
                e["type"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or(""),
                e["instance"].as_str().unwrap_or("-"),
                e["message"].as_str().unwrap_or("")
            ),
        }
    }
    Ok(())
}

/// `local hibernate` and `local maintenance`: the plugin's switch on a
/// local cluster.
async fn local_switch(
    state_dir: Option<std::path::PathBuf>,
    args: &Toggle,
    which: Switch,
) -> anyhow::Result<()> {
    let t = crate::plugin::PluginTarget::local(state_dir);
    crate::plugin::switch(&t, &args.cluster, which, args.on()).await
}
