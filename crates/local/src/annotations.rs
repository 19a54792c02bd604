//! Annotations on a local cluster and its instances, the local stand-in
//! for `metadata.annotations` on the Cluster and its Pods: kept in
//! `annotations.json` in the state directory, changed under a lock by
//! `cnmysql local annotate` (shaped like `kubectl annotate`) and by the
//! control plane (the `cnmysql.io/upgrade-*` mirrors and the marks of an
//! orchestrated upgrade).

use std::collections::BTreeMap;
use std::fs::File;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::state::StateDir;

/// What `annotations.json` holds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    #[serde(default)]
    pub cluster: BTreeMap<String, String>,
    #[serde(default)]
    pub instances: BTreeMap<String, BTreeMap<String, String>>,
}

impl Annotations {
    pub fn of(&self, instance: Option<&str>) -> BTreeMap<String, String> {
        match instance {
            None => self.cluster.clone(),
            Some(i) => self.instances.get(i).cloned().unwrap_or_default(),
        }
    }
}

fn file(dir: &StateDir) -> std::path::PathBuf {
    dir.root.join("annotations.json")
}

/// The annotations as stored (none when the file does not exist yet).
pub fn read(dir: &StateDir) -> anyhow::Result<Annotations> {
    match std::fs::read_to_string(file(dir)) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} cannot be read: {e}", file(dir).display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Annotations::default()),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", file(dir).display())),
    }
}

/// Read-modify-write under an exclusive lock.
pub fn update<T>(
    dir: &StateDir,
    f: impl FnOnce(&mut Annotations) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.root.join("annotations.lock"))?;
    let _guard = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
    let mut a = read(dir)?;
    let before = a.clone();
    let out = f(&mut a)?;
    if a != before {
        cnmysql_tls::write_private(&file(dir), &serde_json::to_string_pretty(&a)?, false)?;
    }
    Ok(out)
}

/// Set (Some) or remove (None) annotations on `instance`, or on the
/// cluster.
pub fn set(
    dir: &StateDir,
    instance: Option<&str>,
    changes: &BTreeMap<String, Option<String>>,
) -> anyhow::Result<()> {
    update(dir, |a| {
        let map = match instance {
            None => &mut a.cluster,
            Some(i) => a.instances.entry(i.to_string()).or_default(),
        };
        for (k, v) in changes {
            match v {
                Some(v) => map.insert(k.clone(), v.clone()),
                None => map.remove(k),
            };
        }
        Ok(())
    })
}

/// One `KEY=VALUE` (set) or `KEY-` (remove) of `cnmysql local annotate`.
pub fn parse_change(arg: &str) -> anyhow::Result<(String, Option<String>)> {
    let (key, value) = match arg.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => match arg.strip_suffix('-') {
            Some(k) => (k, None),
            None => anyhow::bail!(
                "{arg:?} is neither KEY=VALUE (set) nor KEY- (remove), as with kubectl annotate"
            ),
        },
    };
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    let prefix_ok = prefix.len() <= 253
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b));
    anyhow::ensure!(
        name_ok && prefix_ok,
        "{key:?} is not an annotation key: [prefix/]name, the name up to 63 letters, digits, '-', '_' or '.'"
    );
    if let (cnmysql_core::upgrade::annotations::UPGRADE_TO, Some(v)) = (key, &value) {
        cnmysql_core::upgrade::annotations::parse(v).map_err(anyhow::Error::msg)?;
    }
    Ok((key.to_string(), value))
}

/// `cnmysql local annotate`: change the annotations of the cluster in
/// `dir` (`instance` None) or of one of its instances. A key that already
/// holds another value is refused unless `overwrite` (as kubectl does);
/// nothing is written then. Says what it did.
pub fn annotate(
    dir: &StateDir,
    instance: Option<&str>,
    changes: &[(String, Option<String>)],
    overwrite: bool,
) -> anyhow::Result<String> {
    let cluster = dir.load_cluster()?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    if let Some(i) = instance {
        let known = cnmysql_api::names::ordinal_of(&name, i)
            .is_some_and(|o| o >= 1 && o as i32 <= cluster.spec.instances);
        anyhow::ensure!(
            known,
            "{i} is not an instance of {name} (it has {name}-1 .. {name}-{})",
            cluster.spec.instances
        );
    }
    update(dir, |a| {
        let map = match instance {
            None => &mut a.cluster,
            Some(i) => a.instances.entry(i.to_string()).or_default(),
        };
        for (k, v) in changes {
            if let (Some(old), Some(new)) = (map.get(k), v)
                && old != new
                && !overwrite
            {
                anyhow::bail!(
                    "{k} already has a value ({old}), and --overwrite is false; nothing was changed"
                );
            }
        }
        for (k, v) in changes {
            match v {
                Some(v) => map.insert(k.clone(), v.clone()),
                None => map.remove(k),
            };
        }
        Ok(())
    })?;
    Ok(format!("{} annotated", instance.unwrap_or(&name)))
}

/// What the annotations ask, for the core (`Asked`, its servers still to
/// be resolved).
pub fn asked(
    dir: &StateDir,
    cluster: &cnmysql_api::Cluster,
) -> anyhow::Result<cnmysql_core::upgrade::annotations::Asked> {
    let a = read(dir)?;
    let mut on_cluster = cluster.metadata.annotations.clone().unwrap_or_default();
    on_cluster.extend(a.cluster);
    let names = (1..=cluster.spec.instances.max(0) as u32).map(|i| {
        cnmysql_api::names::instance_name(cluster.metadata.name.as_deref().unwrap_or_default(), i)
    });
    Ok(cnmysql_core::upgrade::annotations::Asked {
        cluster: on_cluster,
        instances: names
            .map(|n| {
                let m = a.instances.get(&n).cloned().unwrap_or_default();
                (n, m)
            })
            .collect(),
        servers: BTreeMap::new(),
    })
}
