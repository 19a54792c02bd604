//! Routing each turn: the endpoints follow the status the pass left, with
//! the grace a readiness probe would give an instance whose manager missed
//! a poll; the table is written where `local status` and a restarted
//! control plane find it.

use cnmysql_api::ServiceRole;
use cnmysql_core::services::desired_routes;
use cnmysql_core::status::Snapshot;
use tokio::sync::watch;

use crate::proxy::{self, RouteTable};
use crate::route_grace::RouteGrace;
use crate::state::StateDir;

/// The Services' endpoints as the control plane keeps them.
pub(crate) struct Routing {
    services: Vec<(String, ServiceRole)>,
    routes: watch::Sender<RouteTable>,
    grace: RouteGrace,
}

impl Routing {
    pub(crate) fn new(
        services: Vec<(String, ServiceRole)>,
        routes: watch::Sender<RouteTable>,
    ) -> Routing {
        Routing {
            services,
            routes,
            grace: RouteGrace::default(),
        }
    }

    /// Follow `snapshot`; `gone`: the instances whose processes are gone.
    pub(crate) fn route(&mut self, dir: &StateDir, snapshot: &Snapshot, gone: &[String]) {
        let routes = desired_routes(&self.grace.fill(snapshot, gone));
        let table = proxy::table(&routes, &self.services);
        if *self.routes.borrow() != table {
            tracing::info!(routes = ?table, "routing changed");
            self.routes.send_replace(table.clone());
            let _ = cnmysql_tls::write_private(
                &dir.routes_file(),
                &serde_json::to_string_pretty(&table).unwrap_or_default(),
                false,
            );
        }
    }
}
