//! Progress for the human watching `cnmysql local up`: readable lines on a
//! terminal, JSON lines in a log file; each instance's phase as it changes,
//! cloning progress with rate and ETA, the cluster's phase.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use cnmysql_core::phase::Summary;
use cnmysql_core::status::{InstancePhase, Observed};

/// How progress is shown: readable lines on a terminal, JSON in a log file.
#[derive(Clone, Copy)]
pub struct Reporter {
    pub json: bool,
    pub color: bool,
}

impl Reporter {
    pub fn for_stdout() -> Reporter {
        let tty = std::io::stdout().is_terminal();
        Reporter {
            json: false,
            color: tty && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    pub fn say(&self, who: Option<&str>, msg: &str) {
        if self.json {
            let line = serde_json::json!({
                "timestamp": jiff::Timestamp::now().to_string(),
                "level": "INFO",
                "target": "cnmysql::local",
                "instance": who,
                "message": msg,
            });
            println!("{line}");
        } else if let Some(w) = who {
            if self.color {
                println!("\x1b[36m{w}\x1b[0m: {msg}");
            } else {
                println!("{w}: {msg}");
            }
        } else if self.color {
            println!("\x1b[1m{msg}\x1b[0m");
        } else {
            println!("{msg}");
        }
    }
}

/// What was last said, so that each change is said once.
#[derive(Default)]
pub struct Progress {
    phases: BTreeMap<String, (InstancePhase, String)>,
    clone_reports: BTreeMap<String, Instant>,
    cluster_phase: String,
}

impl Progress {
    /// Say what changed since the last poll.
    pub fn report(&mut self, reporter: &Reporter, observed: &[Observed], summary: &Summary) {
        for o in observed {
            let Some(st) = &o.status else { continue };
            let key = (st.phase, st.message.clone());
            if self.phases.get(&o.name) != Some(&key) {
                let text = if st.message.is_empty() {
                    format!("{:?}", st.phase)
                } else {
                    format!("{:?}: {}", st.phase, st.message)
                };
                reporter.say(Some(&o.name), &text);
                self.phases.insert(o.name.clone(), key);
            }
            if let Some(c) = &st.clone {
                let due = self
                    .clone_reports
                    .get(&o.name)
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
                // Reported once data has flowed for a second: an earlier
                // rate (and ETA) is noise.
                if due && c.bytes > 0 && c.elapsed_seconds >= 1.0 {
                    reporter.say(Some(&o.name), &c.describe());
                    self.clone_reports.insert(o.name.clone(), Instant::now());
                }
            }
        }
        let phase_text = format!("{} ({})", summary.phase.as_str(), summary.reason);
        if phase_text != self.cluster_phase {
            reporter.say(None, &format!("cluster: {phase_text}"));
            self.cluster_phase = phase_text;
        }
    }
}
