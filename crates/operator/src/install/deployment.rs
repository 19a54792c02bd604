//! The operator's Deployment and its metrics Service.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Options;
use super::objects::{Doc, HTTP_PORT, NAME, labels, meta, yaml};
use crate::objects::pod::{OPERATOR_BINARY, container_security, env, field_env};

fn probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(5),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

fn resources(o: &Options) -> ResourceRequirements {
    let r = &o.resources;
    let q = |k: &str, v: &str| (k.to_string(), Quantity(v.into()));
    let mut limits = vec![q("memory", &r.memory_limit)];
    if let Some(cpu) = &r.cpu_limit {
        limits.insert(0, q("cpu", cpu));
    }
    ResourceRequirements {
        requests: Some(
            [q("cpu", &r.cpu_request), q("memory", &r.memory_request)]
                .into_iter()
                .collect(),
        ),
        limits: Some(limits.into_iter().collect()),
        ..Default::default()
    }
}

fn container(o: &Options) -> Container {
    let mut vars = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        env("CNMYSQL_OPERATOR_IMAGE", &o.image),
        env("CNMYSQL_LOG", o.log_level.as_str()),
    ];
    // First: where a kustomize patch puts it (examples/kustomize/namespaced).
    if !o.watch_namespaces.is_empty() {
        vars.insert(
            0,
            env("CNMYSQL_WATCH_NAMESPACES", &o.watch_namespaces.join(",")),
        );
    }
    Container {
        name: "operator".into(),
        image: Some(o.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![OPERATOR_BINARY.into(), "operator".into()]),
        env: Some(vars),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: HTTP_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        liveness_probe: Some(probe("/healthz")),
        readiness_probe: Some(probe("/readyz")),
        resources: Some(resources(o)),
        // The same as the instances' containers.
        security_context: Some(container_security()),
        ..Default::default()
    }
}

pub(super) fn deployment(o: &Options) -> Deployment {
    Deployment {
        metadata: meta(NAME, Some(&o.namespace)),
        spec: Some(DeploymentSpec {
            replicas: Some(o.replicas),
            selector: LabelSelector {
                match_labels: Some(labels()),
                match_expressions: None,
            },
            // The new replica waits for the old one's lease: never two
            // leaders, and no gap longer than the lease.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.into()),
                    containers: vec![container(o)],
                    termination_grace_period_seconds: Some(30),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The Deployment and the Service in front of its `/metrics`.
pub(super) fn workload(o: &Options) -> Vec<Doc> {
    let service = Service {
        metadata: meta("cnmysql-operator-metrics", Some(&o.namespace)),
        spec: Some(ServiceSpec {
            selector: Some(labels()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: HTTP_PORT,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    vec![
        yaml("apps/v1", "Deployment", &deployment(o)),
        yaml("v1", "Service", &service),
    ]
}
