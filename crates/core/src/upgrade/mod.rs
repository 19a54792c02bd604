//! Everything that moves instances to a new definition, manager or server,
//! one concern per module, layered so that no module imports one that
//! imports it back:
//!
//! - [`annotations`]: what the `cnmysql.io/upgrade-*` annotations ask and
//!   record (pure vocabulary, nothing of a snapshot);
//! - [`version`]: server versions and the moves between them allowed;
//! - [`image`]: image catalogs, resolving the spec to an image and a
//!   version;
//! - [`gates`]: the checks every kind of upgrade shares (a settled primary,
//!   healthy instances, the switchover target, steps in flight);
//! - [`annotated`]: upgrades asked per instance by annotation, and
//!   [`annotated_pass`], the pass that decides them;
//! - [`orchestrated`]: the Cluster-wide annotated upgrade;
//! - [`server`] (with [`server_checks`]): the server-version upgrade's
//!   ordered steps in `status.upgradeHistory`;
//! - [`window`]: the maintenance window;
//! - [`rollout`]: the health-gated order in which instances are recreated or
//!   restarted, the primary last after a switchover;
//! - [`step`]: the rollouts' part of a reconcile step.

pub mod annotated;
pub mod annotated_pass;
pub mod annotations;
pub mod gates;
pub mod image;
pub mod orchestrated;
pub mod rollout;
pub mod server;
pub mod server_checks;
pub mod step;
pub mod version;
pub mod window;
