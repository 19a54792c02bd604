//! Patch and major upgrades under writes; downgrades refused.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn a_patch_upgrade_moves_replicas_then_the_primary_loses_nothing_and_a_downgrade_is_refused()
{
    // Started from an image catalog in the manifest, by registry names the
    // store knows by name:tag (as on Kubernetes).
    let catalog = "apiVersion: mysql.cnmysql.io/v1\nkind: ClusterImageCatalog\nmetadata:\n  name: mariadb\nspec:\n  flavor: mariadb\n  images:\n  - version: \"10.11.18\"\n    image: docker.io/library/mariadb:10.11.18\n---\n";
    let first = manifest("sup1", 3, "mariadb:10.11.18", "").replace(
        "    image: mariadb:10.11.18\n",
        "    version: \"10.11.18\"\n    imageCatalogRef:\n      kind: ClusterImageCatalog\n      name: mariadb\n",
    );
    let c = LocalCluster::start("sup1", &format!("{catalog}{first}"));
    assert_eq!(c.status()["serverVersion"], "10.11.18");
    assert_eq!(c.status()["image"], "docker.io/library/mariadb:10.11.18");
    for _ in 0..6 {
        assert!(
            c.has_event("UpdatingInstance").is_none(),
            "nothing to roll out after a start"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    upgrade_under_writes(&c, "sup1", "mariadb:10.11.19", "10.11.19").await;
    downgrade_is_refused(&c, "sup1", "mariadb:10.11.18", "10.11.19").await;
    // The last line of defence: an instance pointed at the older server by
    // hand refuses to start it on its newer data, and the rollout puts it
    // back on the cluster's image.
    let name = "sup1-3";
    apply(&c, &manifest("sup1", 3, "mariadb:10.11.19", ""));
    wait_for("the refusal cleared", Duration::from_secs(30), || async {
        (c.status()["phase"] == "Cluster in healthy state").then_some(())
    })
    .await;
    c.down();
    let cfg_path = c.instance_dir(name).join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let old_root = cfg["programs"]["image"]["root"]
        .as_str()
        .unwrap()
        .replace("10.11.19", "10.11.18");
    cfg["programs"]["image"]["reference"] = "mariadb:10.11.18".into();
    cfg["programs"]["image"]["root"] = old_root.into();
    cfg["programs"]["image"]["serverVersion"] = "10.11.18".into();
    std::fs::write(&cfg_path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    c.up(&manifest("sup1", 3, "mariadb:10.11.19", ""));
    wait_for(
        &format!("{name} back on 10.11.19"),
        Duration::from_secs(120),
        || async {
            let st = c.instances().remove(name)?;
            (st["ready"] == true && st["serverVersion"] == "10.11.19").then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(c.instance_dir(name).join("manager.log")).unwrap();
    assert!(
        log.contains("refusing to start 10.11.18 on data that 10.11.19 has run on"),
        "the manager refused the older server"
    );
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn a_major_upgrade_runs_mariadb_upgrade_on_every_instance_and_a_downgrade_is_refused() {
    let c = LocalCluster::start("sup2", &manifest("sup2", 3, "mariadb:10.11.19", ""));
    upgrade_under_writes(&c, "sup2", "mariadb:11.8", "11.8").await;
    // System tables at the new version everywhere: what mariadb-upgrade
    // recorded, and the server's own view of a system table it changed.
    for (n, st) in c.instances() {
        assert!(
            st["systemTablesVersion"]
                .as_str()
                .unwrap()
                .starts_with("11.8"),
            "{n}: {st:#}"
        );
        let info =
            std::fs::read_to_string(c.instance_dir(&n).join("data/mariadb_upgrade_info")).unwrap();
        assert!(info.starts_with("11.8"), "{n}: {info}");
        let mut a = c.admin(&n).await;
        let v: Option<String> = a.query_first("SELECT VERSION()").await.unwrap();
        assert!(v.unwrap().starts_with("11.8"));
    }
    let asked: Vec<String> = c
        .events()
        .iter()
        .filter(|e| e["reason"] == "SystemTablesUpgraded")
        .map(|e| e["instance"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[0], c.current_primary(), "the primary first");
    downgrade_is_refused(&c, "sup2", "mariadb:10.11.19", "11.8").await;
    c.destroy();
}
