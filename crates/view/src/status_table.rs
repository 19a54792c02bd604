//! The status view: one table of a cluster for people, rendered the same
//! by `cnmysql local status` and `kubectl cnmsql status`. Built from the
//! cluster status alone (what the control plane last reported), and
//! refined with what each instance answers now where the reader can ask it
//! (locally).

use cnmysql_api::ClusterStatus;

use cnmysql_core::status::{InstanceStatus, Role};

/// One instance's row. `None` or `-` where the reader cannot know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub instance: String,
    pub role: String,
    pub ready: Option<bool>,
    pub read_only: Option<bool>,
    pub phase: String,
    pub gtid: String,
    pub lag_seconds: Option<u64>,
    pub semi_sync: String,
    pub manager: String,
    /// The server version it runs (or last ran on its data).
    pub version: String,
    /// How full its volumes are.
    pub volumes: Vec<cnmysql_api::VolumeUsage>,
}

/// The cluster as the table shows it.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub cluster: String,
    /// Where it runs and whether: `running`, `stopped`, `namespace prod`.
    pub place: String,
    pub status: ClusterStatus,
    pub declared: i32,
    /// Lines under the phase: `("Services", "rw=…")`, `("Metrics", …)`.
    pub extra: Vec<(String, String)>,
    /// The status could not be read (it is then empty).
    pub status_error: Option<String>,
    pub rows: Vec<Row>,
}

impl View {
    /// From the cluster status: every declared instance as the control
    /// plane last reported it.
    pub fn from_status(cluster: &str, declared: i32, status: &ClusterStatus) -> View {
        let rows = (1..=declared.max(0) as u32)
            .map(|n| {
                let name = cnmysql_api::names::instance_name(cluster, n);
                let live = status.instance_states.get(&name);
                Row {
                    role: live.map(|l| l.role.clone()).unwrap_or_else(|| "-".into()),
                    ready: live.map(|l| l.ready),
                    read_only: live
                        .filter(|l| l.role != "unreachable")
                        .map(|l| l.read_only),
                    phase: live
                        .map(|l| l.phase.clone())
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "-".into()),
                    gtid: status
                        .gtid_executed_by_instance
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| "-".into()),
                    lag_seconds: live.and_then(|l| l.lag_seconds),
                    semi_sync: live
                        .map(|l| l.semi_sync.clone())
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "-".into()),
                    manager: status
                        .executable_hash_by_instance
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| "-".into()),
                    version: status
                        .data_version_by_instance
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| "-".into()),
                    volumes: live.map(|l| l.volumes.clone()).unwrap_or_default(),
                    instance: name,
                }
            })
            .collect();
        View {
            cluster: cluster.to_string(),
            place: String::new(),
            status: status.clone(),
            declared,
            extra: Vec::new(),
            status_error: None,
            rows,
        }
    }

    /// What `instance` answers now replaces what the status last said;
    /// `None`: it did not answer.
    pub fn refine(&mut self, instance: &str, now: Option<&InstanceStatus>) {
        let Some(row) = self.rows.iter_mut().find(|r| r.instance == instance) else {
            return;
        };
        *row = match now {
            // As the control plane reports it (`instanceStates`).
            None => Row {
                instance: instance.to_string(),
                role: "unreachable".into(),
                ready: Some(false),
                read_only: None,
                phase: "-".into(),
                gtid: row.gtid.clone(),
                lag_seconds: None,
                semi_sync: "-".into(),
                manager: row.manager.clone(),
                version: row.version.clone(),
                volumes: row.volumes.clone(),
            },
            Some(s) => Row {
                instance: instance.to_string(),
                role: match s.role {
                    Role::Primary => "primary",
                    Role::Replica => "replica",
                    Role::Unknown => "-",
                }
                .into(),
                ready: Some(s.ready),
                read_only: Some(s.read_only),
                phase: format!("{:?}", s.phase).to_lowercase(),
                gtid: if s.gtid_position.is_empty() {
                    "-".into()
                } else {
                    s.gtid_position.clone()
                },
                lag_seconds: s.lag_seconds,
                semi_sync: cnmysql_core::semisync::summary(s),
                manager: s.executable_hash.clone(),
                version: if s.server_version.is_empty() {
                    row.version.clone()
                } else {
                    s.server_version.clone()
                },
                volumes: s.volumes.clone(),
            },
        };
    }

    /// The table; colours only when `color`.
    pub fn render(&self, color: bool) -> String {
        let mut out = self.summary(color);
        out.push_str(&self.instance_table(color));
        out.push_str(&self.upgrades());
        out.push_str(&self.conditions());
        out
    }

    /// The cluster's lines: primary, phase, image, backups, what else the
    /// platform adds.
    fn summary(&self, color: bool) -> String {
        let st = &self.status;
        let mut out = String::new();
        out.push_str(&format!("Cluster:   {}  ({})\n", self.cluster, self.place));
        out.push_str(&format!(
            "Phase:     {}{}\n",
            st.phase.map(|p| p.as_str()).unwrap_or("Unknown"),
            st.phase_reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        ));
        if let Some(e) = &self.status_error {
            out.push_str(&paint(
                color,
                "31",
                &format!("Status:    cannot be read ({e}); no topology changes until it can"),
            ));
            out.push('\n');
        }
        out.push_str(&format!(
            "Primary:   current {}  target {}\n",
            st.current_primary.as_deref().unwrap_or("-"),
            st.target_primary.as_deref().unwrap_or("-")
        ));
        out.push_str(&format!(
            "Instances: {} declared, {} ready\n",
            self.declared, st.ready_instances
        ));
        if let Some(image) = &st.image {
            let mut line = format!(
                "Server:    {} ({image})",
                st.server_version.as_deref().unwrap_or("version unknown")
            );
            if let Some(t) = st.target_image.as_ref().filter(|t| *t != image) {
                line.push_str(&format!(
                    "  target {} ({t})",
                    st.target_server_version
                        .as_deref()
                        .unwrap_or("version unknown")
                ));
            }
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(b) = &st.backup {
            if let Some(a) = &b.archive {
                let line = if a.error.is_empty() {
                    format!(
                        "Archive:   complete until {}  last {}",
                        if a.complete_until.is_empty() {
                            "-"
                        } else {
                            &a.complete_until
                        },
                        if a.last_transaction.is_empty() {
                            "-"
                        } else {
                            &a.last_transaction
                        }
                    )
                } else {
                    paint(
                        color,
                        "31",
                        &format!("Archive:   failing since {}: {}", a.failing_since, a.error),
                    )
                };
                out.push_str(&line);
                out.push('\n');
            }
            if let Some(l) = &b.last_successful_backup {
                out.push_str(&format!(
                    "Backup:    last {} of {} at {}, consistent with {}\n",
                    l.id, l.instance, l.stopped_at, l.gtid
                ));
            }
            if let Some(r) = &b.recovered {
                out.push_str(&format!(
                    "Recovered: from backup {} to {} (last commit {})\n",
                    r.backup_id,
                    r.gtid,
                    if r.last_commit_time.is_empty() {
                        "-"
                    } else {
                        &r.last_commit_time
                    }
                ));
            }
        }
        if let Some(line) = replica_line(st, color) {
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(since) = &st.primary_failing_since {
            out.push_str(&paint(
                color,
                "31",
                &format!("Primary failing since {since}"),
            ));
            out.push('\n');
        }
        for (k, v) in &self.extra {
            out.push_str(&format!("{:<11}{v}\n", format!("{k}:")));
        }
        out.push('\n');
        out
    }

    /// One row per instance, ready and not painted green and red on a
    /// terminal.
    fn instance_table(&self, color: bool) -> String {
        let st = &self.status;
        let mut out = String::new();
        let header = [
            "INSTANCE",
            "ROLE",
            "READY",
            "READ-ONLY",
            "PHASE",
            "GTID",
            "LAG",
            "SEMI-SYNC",
            "VERSION",
            "MANAGER",
            "STORAGE USED",
        ]
        .map(String::from);
        let yes_no = |b: Option<bool>| match b {
            Some(true) => "yes".to_string(),
            Some(false) => "no".to_string(),
            None => "-".to_string(),
        };
        let rows: Vec<[String; 11]> = self
            .rows
            .iter()
            .map(|r| {
                // Markers a reader must not miss.
                let mut marks = Vec::new();
                if st.fenced_instances.contains(&r.instance) {
                    marks.push("fenced");
                }
                if st.diverged_instances.contains(&r.instance) {
                    marks.push("diverged");
                }
                if st.target_primary.as_deref() == Some(r.instance.as_str())
                    && st.current_primary != st.target_primary
                {
                    marks.push("target");
                }
                let role = if marks.is_empty() {
                    r.role.clone()
                } else {
                    format!("{} ({})", r.role, marks.join(", "))
                };
                [
                    r.instance.clone(),
                    role,
                    yes_no(r.ready),
                    yes_no(r.read_only),
                    r.phase.clone(),
                    short(&r.gtid, 28),
                    r.lag_seconds
                        .map(|l| format!("{l}s"))
                        .unwrap_or_else(|| "-".into()),
                    r.semi_sync.clone(),
                    r.version.clone(),
                    short(&r.manager, 12),
                    storage(&r.volumes),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([header[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| -> String {
            cells
                .iter()
                .zip(&widths)
                .map(|(s, w)| format!("{s:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        out.push_str(&paint(color, "1", &line(&header)));
        out.push('\n');
        for row in &rows {
            let l = line(row);
            let l = match row[2].as_str() {
                "yes" => paint(color, "32", &l),
                "no" => paint(color, "31", &l),
                _ => l,
            };
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// Server upgrades, and upgrades asked by annotation.
    fn upgrades(&self) -> String {
        let st = &self.status;
        let mut out = String::new();
        if !st.upgrade_history.is_empty() {
            out.push_str("\nSERVER UPGRADES\n");
            for r in &st.upgrade_history {
                out.push_str(&format!(
                    "{} → {}  {}  started {}  completed {}\n",
                    r.from_version.as_deref().unwrap_or("?"),
                    r.version,
                    r.phase.as_str(),
                    r.start_time.as_deref().unwrap_or("-"),
                    r.complete_time.as_deref().unwrap_or("-")
                ));
                for c in &r.conditions {
                    let step = match &c.instance {
                        Some(i) => format!("{} {i}", c.type_),
                        None => c.type_.clone(),
                    };
                    out.push_str(&format!(
                        "  {:<40} {:<7} {:<16} {}\n",
                        step, c.status, c.reason, c.message
                    ));
                }
            }
        }
        if !st.instance_upgrades.is_empty() || st.orchestrated_upgrade.is_some() {
            out.push_str("\nANNOTATED UPGRADES\n");
            let w = st
                .instance_upgrades
                .keys()
                .map(|n| n.len())
                .chain([7])
                .max()
                .unwrap_or(7);
            if let Some(o) = &st.orchestrated_upgrade {
                out.push_str(&format!(
                    "{:<w$}  {:<12} {:<12} {}  {}\n",
                    "cluster",
                    o.status,
                    o.release
                        .as_deref()
                        .map(|r| short(r, 12))
                        .unwrap_or("-".into()),
                    o.upgrade_to,
                    o.message
                ));
            }
            for (name, r) in &st.instance_upgrades {
                let asked = if r.upgrade_to.is_empty() {
                    "(no longer asked)".to_string()
                } else {
                    r.upgrade_to.clone()
                };
                let mut line = format!(
                    "{:<w$}  {:<12} {:<12} {}  attempts {}",
                    name,
                    r.status,
                    r.release
                        .as_deref()
                        .map(|r| short(r, 12))
                        .unwrap_or("-".into()),
                    asked,
                    r.attempts
                );
                if let Some(t) = &r.last_failed_attempt_at {
                    line.push_str(&format!("  last failed {t}"));
                }
                if !r.message.is_empty() {
                    line.push_str(&format!("  {}", r.message));
                }
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }

    fn conditions(&self) -> String {
        let st = &self.status;
        let mut out = String::new();
        if !st.conditions.is_empty() {
            out.push_str("\nCONDITIONS\n");
            for c in &st.conditions {
                out.push_str(&format!(
                    "{:<12} {:<6} {:<24} {}\n",
                    c.type_, c.status, c.reason, c.message
                ));
            }
        }
        out
    }
}

/// A replica cluster's line: what it follows and how far it has come, or
/// that it was promoted.
fn replica_line(st: &ClusterStatus, color: bool) -> Option<String> {
    let r = st.replica.as_ref()?;
    if !r.enabled {
        return Some(format!("Replica:   promoted (it followed {})", r.source));
    }
    let state = match (&r.last_error, r.receiving) {
        (Some(e), _) => paint(color, "31", &format!("not receiving: {e}")),
        (None, true) => format!(
            "receiving, {} behind",
            r.lag_seconds.map_or("-".to_string(), |l| format!("{l}s"))
        ),
        (None, false) => "not receiving".to_string(),
    };
    Some(format!(
        "Replica:   follows {}, {state}; at {}",
        r.source,
        r.gtid_position.as_deref().unwrap_or("-")
    ))
}

/// `data 82% of 1.07 GB, binlogs 3% of 537 MB`; `-` when not measured.
fn storage(volumes: &[cnmysql_api::VolumeUsage]) -> String {
    if volumes.is_empty() {
        return "-".into();
    }
    volumes
        .iter()
        .map(|v| {
            format!(
                "{} {}% of {}",
                v.volume,
                v.used_percent(),
                cnmysql_core::status::human_bytes(v.size_bytes as f64)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// `s` in the terminal colour `code` when `color`.
fn paint(color: bool, code: &str, s: &str) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests;
