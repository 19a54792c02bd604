//! Routing each turn: the endpoints follow the status the pass left, with
//! the grace a readiness probe would give an instance whose manager missed
//! a poll; the table is written where `local status` and a restarted
//! control plane find it.

use cnmysql_core::services::desired_routes;
use cnmysql_core::status::Snapshot;

use crate::control::Running;
use crate::proxy;
use crate::state::StateDir;

pub(crate) fn route(dir: &StateDir, run: &mut Running, snapshot: &Snapshot) {
    let routes = desired_routes(&run.grace.fill(snapshot, &run.supervisor.absent()));
    let table = proxy::table(&routes, &run.services);
    if *run.routes.borrow() != table {
        tracing::info!(routes = ?table, "routing changed");
        run.routes.send_replace(table.clone());
        let _ = cnmysql_tls::write_private(
            &dir.routes_file(),
            &serde_json::to_string_pretty(&table).unwrap_or_default(),
            false,
        );
    }
}
