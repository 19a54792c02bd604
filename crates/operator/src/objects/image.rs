//! Which server image an instance's Pod is made from.

use cnmysql_api::{Cluster, Flavor};

/// The server image when the Cluster names none.
pub fn default_image(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Mariadb => "docker.io/library/mariadb:10.11",
        Flavor::Mysql => "docker.io/library/mysql:9.7",
    }
}

/// The server image instances are made from now: the target the status
/// records (`catalog.rs` writes it before any Pod is made) once its
/// upgrade has started, else the image the cluster runs
/// (`upgrade::image::instance_image`); with neither recorded,
/// `spec.mysql.image` or the flavour's default.
pub fn server_image(cluster: &Cluster) -> String {
    let status = cluster.status.clone().unwrap_or_default();
    cnmysql_core::upgrade::image::instance_image(&status, status.target_image.as_deref())
        .or_else(|| cluster.spec.mysql.image.clone())
        .unwrap_or_else(|| default_image(cluster.spec.mysql.flavor).to_string())
}

/// The server image `instance` is made from: the one its
/// annotation-driven upgrade pinned (`upgrade::annotated::image_for`), else
/// the cluster's ([`server_image`]).
pub fn instance_image(cluster: &Cluster, instance: &str) -> String {
    let status = cluster.status.clone().unwrap_or_default();
    cnmysql_core::upgrade::annotated::image_for(&status, instance, Some(server_image(cluster)))
        .unwrap_or_else(|| server_image(cluster))
}
