//! `kubectl cnmsql --local report`: the local counterpart of the
//! Kubernetes report: the Cluster manifest, its status (as `status` shows
//! it, and as stored), the events, and optionally the last lines of the
//! control plane's and each manager's log. The state directory's secrets
//! and certificates are never read.

use crate::state::StateDir;

/// The report's files, as (path in the bundle, text).
pub async fn collect(
    dir: &StateDir,
    log_tail: Option<usize>,
) -> anyhow::Result<Vec<(String, String)>> {
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let report = crate::status_report(dir).await?;
    let mut files = vec![
        ("cluster.yaml".to_string(), read(&dir.manifest())),
        ("status.txt".to_string(), crate::render_status(&report)),
        (
            "status.json".to_string(),
            serde_json::to_string_pretty(&report)?,
        ),
        ("events.jsonl".to_string(), read(&dir.events_file())),
    ];
    let Some(tail) = log_tail else {
        return Ok(files);
    };
    files.push((
        "logs/control.log".into(),
        last_lines(&read(&dir.control_log()), tail),
    ));
    let mut by_instance: std::collections::BTreeMap<String, String> = Default::default();
    crate::logs::logs(dir, None, Some(tail), false, |instance, line| {
        let text = by_instance.entry(instance.to_string()).or_default();
        text.push_str(line);
        text.push('\n');
    })?;
    files.extend(
        by_instance
            .into_iter()
            .map(|(i, text)| (format!("logs/{i}.jsonl"), text)),
    );
    Ok(files)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[lines.len().saturating_sub(n)..].join("\n");
    out.push('\n');
    out
}
