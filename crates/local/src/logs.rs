//! `cnmysql local logs`: the instance managers' logs of a local cluster
//! (`instances/<name>/manager.log`: the manager's JSON log, with the
//! server's own lines in it), one instance or all, the last lines of each
//! and, when following, new lines as they are written.

use std::io::{BufRead, Seek, SeekFrom};
use std::time::Duration;

use crate::state::StateDir;

/// The instances to read: the one asked for (an error names the others),
/// or all of the cluster's.
fn instances(dir: &StateDir, instance: Option<&str>) -> anyhow::Result<Vec<String>> {
    let cluster = dir.load_cluster()?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let all: Vec<String> = (1..=cluster.spec.instances.max(0))
        .map(|i| format!("{name}-{i}"))
        .collect();
    match instance {
        None => Ok(all),
        Some(i) => {
            cnmysql_core::status::check_member(&name, &cluster.spec, i)?;
            Ok(vec![i.to_string()])
        }
    }
}

/// One log being read: where it was left.
struct Tail {
    instance: String,
    path: std::path::PathBuf,
    offset: u64,
}

impl Tail {
    /// Lines written since the last read, complete ones only.
    fn read_new(&mut self, out: &mut impl FnMut(&str, &str)) -> anyhow::Result<()> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Ok(());
        };
        let len = f.metadata()?.len();
        if len < self.offset {
            self.offset = 0; // the file was replaced
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut r = std::io::BufReader::new(f);
        let mut line = String::new();
        while r.read_line(&mut line)? > 0 {
            if !line.ends_with('\n') {
                break; // still being written
            }
            self.offset += line.len() as u64;
            out(&self.instance, line.trim_end());
            line.clear();
        }
        Ok(())
    }
}

/// Start of the last `n` lines of `path` (the whole file when None).
fn start_of_last(path: &std::path::Path, n: Option<usize>) -> u64 {
    let Some(n) = n else { return 0 };
    let Ok(text) = std::fs::read(path) else {
        return 0;
    };
    let mut seen = 0;
    for (i, b) in text.iter().enumerate().rev().skip(1) {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return i as u64 + 1;
            }
        }
    }
    0
}

/// Each line as (instance, line) to `out`: the last `tail` of each log
/// (all when None), instance after instance; then, with `follow`, new
/// lines of all of them as they come, until the process is stopped.
pub fn logs(
    dir: &StateDir,
    instance: Option<&str>,
    tail: Option<usize>,
    follow: bool,
    mut out: impl FnMut(&str, &str),
) -> anyhow::Result<()> {
    let mut tails: Vec<Tail> = instances(dir, instance)?
        .into_iter()
        .map(|i| {
            let path = dir.manager_log(&i);
            let offset = start_of_last(&path, tail);
            Tail {
                instance: i,
                path,
                offset,
            }
        })
        .collect();
    loop {
        for t in &mut tails {
            t.read_new(&mut out)?;
        }
        if !follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
