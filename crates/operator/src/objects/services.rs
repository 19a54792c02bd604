//! The Services of a Cluster: `<cluster>-rw` (the primary), `-ro` (ready
//! replicas), `-r` (any ready instance), less the disabled defaults, plus
//! the additional ones. The shared template is merged onto the defaults;
//! an additional Service merges its own template onto its role's default
//! (`patch`) or starts from nothing (`replace`). Selector, ports and the
//! ownership labels are always the operator's.
//!
//! The rw Services select the primary by name, from the status
//! ([`crate::labels::service_selector`]): the topology task, which writes
//! that status, applies them ([`rw_services`], `routing.rs`) right after
//! it, and the Cluster reconcile applies the others ([`other_services`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use cnmysql_api::names::{MYSQL_PORT, service_name};
use cnmysql_api::{
    Cluster, ServiceRole, ServiceTemplate, ServiceType, ServiceUpdateStrategy, SessionAffinity,
    TrafficPolicy,
};

use crate::labels::{cluster_labels, service_selector};

/// A Service of `role` named `<cluster>-<suffix>`, with the templates
/// applied in order (later ones win field by field).
fn service(
    cluster: &Cluster,
    suffix: &str,
    role: ServiceRole,
    templates: &[&ServiceTemplate],
) -> Service {
    let name = cluster.name_any();
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let mut spec = ServiceSpec {
        type_: Some("ClusterIP".into()),
        ..Default::default()
    };
    for t in templates {
        if let Some(m) = &t.metadata {
            labels.extend(m.labels.clone());
            annotations.extend(m.annotations.clone());
        }
        let Some(s) = &t.spec else { continue };
        if let Some(ty) = s.type_ {
            spec.type_ = Some(
                match ty {
                    ServiceType::ClusterIP => "ClusterIP",
                    ServiceType::NodePort => "NodePort",
                    ServiceType::LoadBalancer => "LoadBalancer",
                    ServiceType::ExternalName => "ExternalName",
                }
                .into(),
            );
        }
        if let Some(p) = s.external_traffic_policy {
            spec.external_traffic_policy = Some(
                match p {
                    TrafficPolicy::Cluster => "Cluster",
                    TrafficPolicy::Local => "Local",
                }
                .into(),
            );
        }
        if let Some(a) = s.session_affinity {
            spec.session_affinity = Some(
                match a {
                    SessionAffinity::None => "None",
                    SessionAffinity::ClientIP => "ClientIP",
                }
                .into(),
            );
        }
        if !s.load_balancer_source_ranges.is_empty() {
            spec.load_balancer_source_ranges = Some(s.load_balancer_source_ranges.clone());
        }
        if s.external_name.is_some() {
            spec.external_name = s.external_name.clone();
        }
        if s.health_check_node_port.is_some() {
            spec.health_check_node_port = s.health_check_node_port;
        }
    }
    // The operator's own fields last: a template cannot take them over.
    labels.extend(cluster_labels(&name));
    let status = cluster.status.clone().unwrap_or_default();
    let primary = cnmysql_core::services::rw_instance(&status);
    spec.selector = Some(service_selector(&name, role, primary));
    // rw follows the role the operator gives (the `primary` and routable
    // labels), not the Pod's readiness: a primary whose container restarts
    // in place keeps its address in the Service, so a client's connection
    // is refused by the Pod until its server listens again and then goes
    // straight through. With readiness, the Service was left without an
    // endpoint until the kubelet and kube-proxy caught up (a second or two
    // after the server was back), and kube-proxy rejects such connections
    // with ICMP, which the kernel rate-limits: a client retrying quickly
    // saw its connection attempts time out instead of being refused.
    if role == ServiceRole::Rw {
        spec.publish_not_ready_addresses = Some(true);
    }
    spec.ports = Some(vec![ServicePort {
        name: Some("mysql".into()),
        port: i32::from(MYSQL_PORT),
        target_port: Some(IntOrString::String("mysql".into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }]);
    let mut meta = super::meta(cluster, service_name(&name, suffix), labels);
    if !annotations.is_empty() {
        meta.annotations = Some(annotations);
    }
    Service {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

/// Every Service of the Cluster, with the role it routes to.
fn all(cluster: &Cluster) -> Vec<(ServiceRole, Service)> {
    let m = &cluster.spec.managed.services;
    let shared: Vec<&ServiceTemplate> = m.template.iter().collect();
    let mut out: Vec<(ServiceRole, Service)> = ServiceRole::ALL
        .iter()
        .filter(|r| !m.disabled_default_services.contains(r))
        .map(|r| (*r, service(cluster, r.as_str(), *r, &shared)))
        .collect();
    for a in &m.additional {
        let mut templates: Vec<&ServiceTemplate> = match a.update_strategy {
            ServiceUpdateStrategy::Patch => shared.clone(),
            ServiceUpdateStrategy::Replace => Vec::new(),
        };
        templates.extend(a.service_template.iter());
        out.push((
            a.selector_type,
            service(cluster, &a.name, a.selector_type, &templates),
        ));
    }
    out
}

/// Every Service the Cluster declares.
pub fn services(cluster: &Cluster) -> Vec<Service> {
    all(cluster).into_iter().map(|(_, s)| s).collect()
}

/// The Services routing to the primary (rw), for the topology task.
pub fn rw_services(cluster: &Cluster) -> Vec<Service> {
    all(cluster)
        .into_iter()
        .filter(|(r, _)| *r == ServiceRole::Rw)
        .map(|(_, s)| s)
        .collect()
}

/// The others (ro, r), for the Cluster reconcile.
pub fn other_services(cluster: &Cluster) -> Vec<Service> {
    all(cluster)
        .into_iter()
        .filter(|(r, _)| *r != ServiceRole::Rw)
        .map(|(_, s)| s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{INSTANCE, ROLE, ROUTABLE};
    use crate::objects::testutil::cluster;

    fn by_name<'a>(s: &'a [Service], n: &str) -> &'a Service {
        s.iter()
            .find(|x| x.metadata.name.as_deref() == Some(n))
            .unwrap_or_else(|| panic!("no Service {n}"))
    }

    #[test]
    fn defaults_templates_and_additional_services() {
        let c = cluster(
            r#"instances: 3
managed:
  services:
    disabledDefaultServices: [r]
    template:
      metadata:
        labels: {app.kubernetes.io/part-of: shop, cnmysql.io/cluster: hijack}
      spec: {type: LoadBalancer}
    additional:
      - name: lb
        selectorType: rw
        serviceTemplate:
          spec: {externalTrafficPolicy: Local}
      - name: reporting
        selectorType: ro
        updateStrategy: replace
        serviceTemplate:
          metadata:
            labels: {pool: reporting}
          spec: {type: ClusterIP}
"#,
        );
        let s = services(&c);
        let names: Vec<_> = s.iter().map(|x| x.name_any()).collect();
        assert_eq!(names, ["db-rw", "db-ro", "db-lb", "db-reporting"]);

        let rw = by_name(&s, "db-rw");
        let spec = rw.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        let sel = spec.selector.as_ref().unwrap();
        assert_eq!(sel[INSTANCE], "", "no primary yet: rw selects nothing");
        assert!(!sel.contains_key(ROLE));
        assert_eq!(sel[ROUTABLE], "true");
        // rw follows the role, not readiness (an additional rw one too);
        // ro follows readiness.
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let lb = by_name(&s, "db-lb").spec.as_ref().unwrap();
        assert_eq!(lb.publish_not_ready_addresses, Some(true));
        let ro = by_name(&s, "db-ro").spec.as_ref().unwrap();
        assert_eq!(ro.publish_not_ready_addresses, None);
        let labels = rw.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/part-of"], "shop");
        // The template cannot take over the ownership label.
        assert_eq!(labels["cnmysql.io/cluster"], "db");

        let lb = by_name(&s, "db-lb").spec.as_ref().unwrap();
        assert_eq!(
            lb.type_.as_deref(),
            Some("LoadBalancer"),
            "patch keeps the shared template"
        );
        assert_eq!(lb.external_traffic_policy.as_deref(), Some("Local"));

        let rep = by_name(&s, "db-reporting");
        assert_eq!(
            rep.spec.as_ref().unwrap().type_.as_deref(),
            Some("ClusterIP")
        );
        let labels = rep.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["pool"], "reporting");
        assert!(
            !labels.contains_key("app.kubernetes.io/part-of"),
            "replace drops the shared template"
        );
        assert_eq!(
            rep.spec.as_ref().unwrap().selector.as_ref().unwrap()[ROLE],
            "replica"
        );
        let ports = rep.spec.as_ref().unwrap().ports.as_ref().unwrap();
        assert_eq!(ports[0].port, 3306);
    }

    /// rw selects by name the instance the status lets serve: the settled
    /// primary, a switchover's primary until the new one is recorded, and
    /// none during a failover; the topology task applies rw, the
    /// reconcile the rest.
    #[test]
    fn rw_selects_the_serving_primary_by_name() {
        let mut c = cluster(
            "instances: 3\nmanaged:\n  services:\n    additional:\n      - {name: lb, selectorType: rw}\n",
        );
        let rw_of = |c: &Cluster| -> Vec<String> {
            rw_services(c)
                .iter()
                .map(|s| s.spec.as_ref().unwrap().selector.as_ref().unwrap()[INSTANCE].clone())
                .collect()
        };
        let names = |v: Vec<Service>| v.iter().map(|s| s.name_any()).collect::<Vec<_>>();
        assert_eq!(names(rw_services(&c)), ["db-rw", "db-lb"]);
        assert_eq!(names(other_services(&c)), ["db-ro", "db-r"]);
        let status = |current: &str, target: &str, phase| cnmysql_api::ClusterStatus {
            current_primary: Some(current.into()),
            target_primary: Some(target.into()),
            phase,
            ..Default::default()
        };
        c.status = Some(status("db-1", "db-1", None));
        assert_eq!(rw_of(&c), ["db-1", "db-1"]);
        c.status = Some(status("db-1", "db-2", Some(cnmysql_api::Phase::Switchover)));
        assert_eq!(rw_of(&c), ["db-1", "db-1"], "serves until handed over");
        c.status = Some(status("db-2", "db-2", None));
        assert_eq!(rw_of(&c), ["db-2", "db-2"]);
        c.status = Some(status(
            "db-2",
            "db-3",
            Some(cnmysql_api::Phase::FailingOver),
        ));
        assert_eq!(rw_of(&c), ["", ""], "a failing primary serves nothing");
    }
}
