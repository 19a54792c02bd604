//! Requests the API server served, by verb and resource, read off its
//! `apiserver_request_total` counters before and after a measurement: what
//! a Cluster under load costs the control plane (every client counted:
//! the operator, the instance managers, the kubelet, kube-proxy).

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Requests served so far, by `VERB resource[/subresource]`.
pub(crate) struct Counts(BTreeMap<String, f64>);

impl Counts {
    /// Read from the API server's metrics.
    pub(crate) fn read(cp: &cnmysql_envtest::ControlPlane) -> anyhow::Result<Counts> {
        Ok(parse(&cp.kubectl(&["get", "--raw", "/metrics"], None)?))
    }

    /// Requests per second from `self` to `later`, most first; printed.
    pub(crate) fn rates(&self, later: &Counts, secs: f64) -> Value {
        let mut rates: Vec<(&String, f64)> = later
            .0
            .iter()
            .map(|(k, v)| (k, (v - self.0.get(k).unwrap_or(&0.0)) / secs))
            .filter(|(_, r)| *r > 0.0)
            .collect();
        rates.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = rates.iter().map(|(_, r)| r).sum();
        let top: Vec<String> = rates
            .iter()
            .take(8)
            .map(|(k, r)| format!("{k} {r:.1}/s"))
            .collect();
        eprintln!("API requests: {total:.1}/s; most: {}", top.join(", "));
        json!({
            "total_per_second": total,
            "by_verb_and_resource_per_second": rates
                .iter()
                .map(|(k, r)| ((*k).clone(), json!(r)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

fn parse(metrics: &str) -> Counts {
    let mut counts = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
            labels[at..].split('"').next()
        };
        let (Some(verb), Some(resource), Ok(v)) =
            (label("verb"), label("resource"), value.parse::<f64>())
        else {
            continue;
        };
        let key = match label("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{verb} {resource}/{sub}"),
            None => format!("{verb} {resource}"),
        };
        *counts.entry(key).or_insert(0.0) += v;
    }
    Counts(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_by_verb_and_resource() {
        let before = parse(
            "# HELP apiserver_request_total x\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"pods\",subresource=\"\",verb=\"GET\"} 10\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"clusters\",subresource=\"status\",verb=\"PATCH\"} 4\n",
        );
        let after = parse(
            "apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"pods\",subresource=\"\",verb=\"GET\"} 30\n\
             apiserver_request_total{code=\"409\",component=\"apiserver\",resource=\"pods\",subresource=\"\",verb=\"GET\"} 2\n\
             apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"clusters\",subresource=\"status\",verb=\"PATCH\"} 4\n",
        );
        let r = before.rates(&after, 2.0);
        assert_eq!(r["total_per_second"], json!(11.0));
        assert_eq!(
            r["by_verb_and_resource_per_second"]["GET pods"],
            json!(11.0)
        );
        assert!(
            r["by_verb_and_resource_per_second"]
                .get("PATCH clusters/status")
                .is_none()
        );
    }
}
