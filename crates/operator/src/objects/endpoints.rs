//! The EndpointSlices of a Cluster's Services, written by the operator
//! (the Services select nothing): each Service routes to the instances
//! its role has in [`Routes`] (`cnmysql_core::services::
//! routes_following_status`), at their Pods' addresses.
//!
//! Why not a selector: kube-proxy applies endpoint changes at most once a
//! second. A Pod deleted on notice turned terminating at once, which
//! changed every Service selecting it, and kube-proxy applied that at
//! once; `rw`'s move to the new primary 0.3–0.6 s later then waited for
//! the rest of that second (a primary's Pod deleted under writers: 1.1–1.2 s
//! without writes where the handover took 0.64 s). Written here, a route
//! changes only when the decision does, and a change of primary moves
//! `rw`, `ro` and `r` in the same pass.
//!
//! An endpoint's conditions always say ready: membership is the decision,
//! and a Pod's own readiness is already in it (`ro` and `r` take only Pods
//! Ready and not being deleted; `rw` keeps the primary through a restart
//! in place or a handover, as the status says).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::ResourceExt;

use cnmysql_api::Cluster;
use cnmysql_api::names::MYSQL_PORT;
use cnmysql_core::services::Routes;

use crate::labels::cluster_labels;

/// The label naming the Service a slice belongs to (kube-proxy reads it).
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming who writes a slice.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY`] (the EndpointSlice controller leaves such
/// slices alone).
pub const MANAGER: &str = "cnmysql-operator";
/// The EndpointSlice controller's value of [`MANAGED_BY`]: slices it made
/// while a Service had a selector (an older operator's, or someone's edit).
pub const CONTROLLER: &str = "endpointslice-controller.k8s.io";

/// Every slice the Cluster's Services should have, by the routes decided
/// and the Pods' addresses: one per Service and address family present
/// (an IPv4 one, empty when nothing is routed, so that kube-proxy knows
/// the Service has no endpoint). ExternalName Services have none.
pub fn slices(
    cluster: &Cluster,
    routes: &Routes,
    pods: &BTreeMap<String, Pod>,
) -> Vec<EndpointSlice> {
    let mut out = Vec::new();
    for (role, svc) in super::services::with_roles(cluster) {
        let external = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName");
        if external {
            continue;
        }
        let endpoints: Vec<(bool, Endpoint)> = routes
            .for_role(role)
            .iter()
            .filter_map(|name| endpoint(pods.get(name)?))
            .collect();
        let (v6, v4): (Vec<_>, Vec<_>) = endpoints.into_iter().partition(|(v6, _)| *v6);
        let strip = |v: Vec<(bool, Endpoint)>| v.into_iter().map(|(_, e)| e).collect::<Vec<_>>();
        let name = svc.name_any();
        if !v4.is_empty() || v6.is_empty() {
            out.push(slice(cluster, &name, &name, "IPv4", strip(v4)));
        }
        if !v6.is_empty() {
            out.push(slice(
                cluster,
                &name,
                &format!("{name}-ipv6"),
                "IPv6",
                strip(v6),
            ));
        }
    }
    out
}

fn slice(
    cluster: &Cluster,
    service: &str,
    name: &str,
    family: &str,
    endpoints: Vec<Endpoint>,
) -> EndpointSlice {
    let mut labels = cluster_labels(&cluster.name_any());
    labels.insert(SERVICE_NAME.into(), service.into());
    labels.insert(MANAGED_BY.into(), MANAGER.into());
    EndpointSlice {
        metadata: super::meta(cluster, name.to_string(), labels),
        address_type: family.into(),
        endpoints,
        ports: Some(vec![EndpointPort {
            name: Some("mysql".into()),
            port: Some(i32::from(MYSQL_PORT)),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

/// The endpoint of a Pod with an address, and whether it is IPv6.
fn endpoint(pod: &Pod) -> Option<(bool, Endpoint)> {
    let ip = pod
        .status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())?;
    let v6 = ip.contains(':');
    Some((
        v6,
        Endpoint {
            addresses: vec![ip],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                namespace: pod.namespace(),
                uid: pod.uid(),
                ..Default::default()
            }),
            ..Default::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::testutil::cluster;

    fn pod(name: &str, ip: &str) -> (String, Pod) {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}")},
            "spec": {"containers": [], "nodeName": "node-a"},
            "status": {"podIP": ip}
        }))
        .unwrap();
        (name.to_string(), p)
    }

    fn addresses(s: &[EndpointSlice], name: &str) -> Vec<String> {
        let s = s
            .iter()
            .find(|s| s.name_any() == name)
            .unwrap_or_else(|| panic!("no slice {name}"));
        s.endpoints
            .iter()
            .flat_map(|e| e.addresses.clone())
            .collect()
    }

    /// Each Service's slice holds its role's instances at their Pods'
    /// addresses (an additional Service its role's), labelled for
    /// kube-proxy and as ours; an instance without an address is left out
    /// and a Service routing to nothing has an empty slice.
    #[test]
    fn each_service_routes_to_its_roles_instances() {
        let c = cluster(
            "instances: 3\nmanaged:\n  services:\n    additional:\n      - {name: lb, selectorType: rw}\n",
        );
        let pods = BTreeMap::from([
            pod("db-1", "10.0.0.1"),
            pod("db-2", "10.0.0.2"),
            pod("db-3", ""),
        ]);
        let routes = Routes {
            rw: Some("db-1".into()),
            ro: vec!["db-2".into(), "db-3".into()],
            r: vec!["db-1".into(), "db-2".into(), "db-3".into()],
        };
        let s = slices(&c, &routes, &pods);
        let names: Vec<_> = s.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["db-rw", "db-ro", "db-r", "db-lb"]);
        assert_eq!(addresses(&s, "db-rw"), ["10.0.0.1"]);
        assert_eq!(addresses(&s, "db-lb"), ["10.0.0.1"]);
        assert_eq!(addresses(&s, "db-ro"), ["10.0.0.2"]);
        assert_eq!(addresses(&s, "db-r"), ["10.0.0.1", "10.0.0.2"]);
        let rw = &s[0];
        let labels = rw.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SERVICE_NAME], "db-rw");
        assert_eq!(labels[MANAGED_BY], MANAGER);
        assert_eq!(labels["cnmysql.io/cluster"], "db");
        let e = &rw.endpoints[0];
        assert_eq!(e.node_name.as_deref(), Some("node-a"));
        assert_eq!(e.target_ref.as_ref().unwrap().name.as_deref(), Some("db-1"));
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(true));
        assert_eq!(rw.ports.as_ref().unwrap()[0].name.as_deref(), Some("mysql"));
        assert_eq!(rw.ports.as_ref().unwrap()[0].port, Some(3306));

        let none = slices(&c, &Routes::default(), &pods);
        assert!(
            none.iter()
                .all(|s| s.endpoints.is_empty() && s.address_type == "IPv4")
        );
        assert_eq!(none.len(), 4);
    }

    /// IPv6 Pods get a slice of their own family (and no empty IPv4 one);
    /// an ExternalName Service none.
    #[test]
    fn address_families_and_external_names() {
        let c = cluster(
            "instances: 2\nmanaged:\n  services:\n    additional:\n      - name: ext\n        selectorType: r\n        serviceTemplate:\n          spec: {type: ExternalName, externalName: db.example.com}\n",
        );
        let pods = BTreeMap::from([pod("db-1", "fd00::1"), pod("db-2", "fd00::2")]);
        let routes = Routes {
            rw: Some("db-1".into()),
            ro: vec!["db-2".into()],
            r: vec!["db-1".into(), "db-2".into()],
        };
        let s = slices(&c, &routes, &pods);
        let names: Vec<_> = s.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["db-rw-ipv6", "db-ro-ipv6", "db-r-ipv6"]);
        assert!(s.iter().all(|s| s.address_type == "IPv6"));
        assert_eq!(addresses(&s, "db-r-ipv6"), ["fd00::1", "fd00::2"]);
    }
}
