//! The Services of a Cluster: `<cluster>-rw` (the primary), `-ro` (ready
//! replicas), `-r` (any ready instance), less the disabled defaults, plus
//! the additional ones. The shared template is merged onto the defaults;
//! an additional Service merges its own template onto its role's default
//! (`patch`) or starts from nothing (`replace`). Ports and the ownership
//! labels are always the operator's.
//!
//! They select nothing: the operator writes their EndpointSlices itself
//! (`endpoints.rs`, applied by the topology task in `routing.rs`), so that
//! a Pod deleted on notice changes no route until the status moves them
//! all at once (kube-proxy applies changes at most once a second).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use cnmysql_api::names::{MYSQL_PORT, service_name};
use cnmysql_api::{
    Cluster, ServiceRole, ServiceTemplate, ServiceType, ServiceUpdateStrategy, SessionAffinity,
    TrafficPolicy,
};

use crate::labels::cluster_labels;

/// A Service of `role` named `<cluster>-<suffix>`, with the templates
/// applied in order (later ones win field by field).
fn service(cluster: &Cluster, suffix: &str, templates: &[&ServiceTemplate]) -> Service {
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
pub fn with_roles(cluster: &Cluster) -> Vec<(ServiceRole, Service)> {
    let m = &cluster.spec.managed.services;
    let shared: Vec<&ServiceTemplate> = m.template.iter().collect();
    let mut out: Vec<(ServiceRole, Service)> = ServiceRole::ALL
        .iter()
        .filter(|r| !m.disabled_default_services.contains(r))
        .map(|r| (*r, service(cluster, r.as_str(), &shared)))
        .collect();
    for a in &m.additional {
        let mut templates: Vec<&ServiceTemplate> = match a.update_strategy {
            ServiceUpdateStrategy::Patch => shared.clone(),
            ServiceUpdateStrategy::Replace => Vec::new(),
        };
        templates.extend(a.service_template.iter());
        out.push((a.selector_type, service(cluster, &a.name, &templates)));
    }
    out
}

/// Every Service the Cluster declares.
pub fn services(cluster: &Cluster) -> Vec<Service> {
    with_roles(cluster).into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        // The operator writes every Service's endpoints (`endpoints.rs`).
        for svc in &s {
            let spec = svc.spec.as_ref().unwrap();
            assert_eq!(spec.selector, None, "{} selects nothing", svc.name_any());
            assert_eq!(spec.publish_not_ready_addresses, None);
        }
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
        let ports = rep.spec.as_ref().unwrap().ports.as_ref().unwrap();
        assert_eq!(ports[0].port, 3306);
    }
}
