//! Detaching from a failed source: the replicas' stop in the first half of
//! every failover.

use super::*;

/// A TCP relay to the primary that can go silent, as a source whose Pod
/// or node is gone looks from a replica: once `silent`, the connections
/// it relayed are closed, and new ones are taken and never answered (no
/// server greeting comes).
struct Relay {
    port: u16,
    silent: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn to(upstream: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (silent, quiet) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if *quiet.borrow() {
                    held.push(client);
                    continue;
                }
                let mut quiet = quiet.clone();
                tokio::spawn(async move {
                    let mut server = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                        .await
                        .unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = quiet.wait_for(|q| *q) => {}
                    }
                });
            }
        });
        Relay { port, silent, task }
    }
}

/// Stop replication and point it at `port` on this host.
async fn point_at(conn: &mut mysql_async::Conn, port: u16) {
    conn.query_drop(sql("STOP SLAVE", "STOP REPLICA"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "{} {port}",
        sql(
            "CHANGE MASTER TO MASTER_PORT=",
            "CHANGE REPLICATION SOURCE TO SOURCE_PORT="
        ),
    ))
    .await
    .unwrap();
}

async fn io_state(conn: &mut mysql_async::Conn) -> (String, String) {
    let row: Option<mysql_async::Row> = conn
        .query_first(sql("SHOW SLAVE STATUS", "SHOW REPLICA STATUS"))
        .await
        .unwrap();
    let row = row.expect("replication configured");
    let get = |c: &str| {
        row.get::<Option<String>, _>(c)
            .flatten()
            .unwrap_or_default()
    };
    (
        get(sql("Slave_IO_Running", "Replica_IO_Running")),
        get(sql("Slave_IO_State", "Replica_IO_State")),
    )
}

/// The receiver of a semi-sync replica whose source went silent stops
/// within a bound, as every failover from a vanished primary needs it to.
/// MariaDB's receiver, stopping, opens one more connection to the source to
/// end its dump thread and waits out that connection's timeout (2 s with
/// the server's default, on every failover on the real node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_whose_source_went_silent_stops_within_a_bound() {
    let c = LocalCluster::start("detach", &durable("detach", 2));
    wait_ready(&c, 2, Duration::from_secs(90)).await;
    // The replica's manager would undo what is set up below: held still.
    let manager = nix::unistd::Pid::from_raw(c.manager_pid("detach-2"));
    nix::sys::signal::kill(manager, Signal::SIGSTOP).unwrap();
    wait_stopped(manager.as_raw());
    let relay = Relay::to(c.instance_port("detach-1")).await;
    let mut conn = c.admin("detach-2").await;
    point_at(&mut conn, relay.port).await;
    conn.query_drop(sql("START SLAVE", "START REPLICA"))
        .await
        .unwrap();
    let receiving = |s: &(String, String)| s.0 == "Yes";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !receiving(&io_state(&mut conn).await) {
        assert!(
            Instant::now() < deadline,
            "never received through the relay"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The source goes silent: the receiver reconnects, and waits.
    relay.silent.send_replace(true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while receiving(&io_state(&mut conn).await) {
        assert!(
            Instant::now() < deadline,
            "the receiver never lost its source"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = Instant::now();
    conn.query_drop(stop_io_thread()).await.unwrap();
    let took = t.elapsed();
    eprintln!("stopped in {took:?}");
    assert_eq!(io_state(&mut conn).await.0, "No");
    // MariaDB: bounded by rpl_semi_sync_slave_kill_conn_timeout (1 s in
    // our configuration; 2 s measured with the server's default). MySQL:
    // its stop loop signals the receiver again every 2 s, and the receiver
    // waiting for a silent source's greeting ends only then (issue 46).
    let bound = match flavor() {
        Flavor::Mariadb => Duration::from_millis(1500),
        Flavor::Mysql => Duration::from_millis(2500),
    };
    assert!(took < bound, "the stop took {took:?}, over {bound:?}");
    // Back to its source; its manager goes on.
    point_at(&mut conn, c.instance_port("detach-1")).await;
    relay.task.abort();
    nix::sys::signal::kill(manager, Signal::SIGCONT).unwrap();
    wait_ready(&c, 2, Duration::from_secs(60)).await;
}
