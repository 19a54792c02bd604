use super::*;

fn texts(v: Result<Planned, String>) -> Vec<String> {
    v.unwrap().run.into_iter().map(|s| s.text).collect()
}

fn user(set_password: bool) -> DeclaredUser {
    DeclaredUser {
        name: "shopper".into(),
        host: "%".into(),
        password: "s3cr'et".into(),
        set_password,
        require: RequireSpec {
            ssl: true,
            ..Default::default()
        },
        limits: UserLimits {
            max_user_connections: Some(20),
            ..Default::default()
        },
        adopt: false,
    }
}

fn grant(privileges: &[&str]) -> DeclaredGrant {
    grant_on("shop", privileges)
}

fn grant_on(database: &str, privileges: &[&str]) -> DeclaredGrant {
    DeclaredGrant {
        user: "shopper".into(),
        host: "%".into(),
        database: database.into(),
        table: "*".into(),
        privileges: privileges.iter().map(|s| s.to_string()).collect(),
        grant_option: false,
    }
}

fn shopper() -> Made {
    Made::User {
        name: "shopper".into(),
        host: "%".into(),
    }
}

/// The user shopper exists, made by a declaration, as `user()` declares
/// it; so does the database shop.
fn with_user() -> Observed {
    let mut o = Observed::default();
    o.users.insert(
        ("shopper".into(), "%".into()),
        ObservedUser {
            ssl_type: "ANY".into(),
            limits: [0, 0, 0, 20],
            ..Default::default()
        },
    );
    o.made.insert(shopper());
    o.made.insert(Made::Database("shop".into()));
    o
}

fn database(name: &str, adopt: bool) -> Declared {
    Declared::Database(DeclaredDatabase {
        name: name.into(),
        character_set: None,
        collation: None,
        adopt,
    })
}

#[test]
fn a_missing_database_is_recorded_then_created_and_one_held_as_declared_is_left() {
    let d = database("shop", false);
    let mut o = Observed::default();
    let p = plan(&d, &o).unwrap();
    assert_eq!(
        p.run.iter().map(|s| s.text.as_str()).collect::<Vec<_>>(),
        [
            "INSERT IGNORE INTO `cnmysql`.`declared_objects` (kind, name, host) VALUES ('database', 'shop', '')",
            "CREATE DATABASE `shop` CHARACTER SET `utf8mb4`"
        ]
    );
    assert_eq!(
        p.undo[0].text,
        "DELETE FROM `cnmysql`.`declared_objects` WHERE kind = 'database' AND name = 'shop' AND host = ''",
        "a creation that fails takes its record back"
    );
    o.made.insert(Made::Database("shop".into()));
    o.databases.insert(
        "shop".into(),
        ("utf8mb4".into(), "utf8mb4_0900_ai_ci".into()),
    );
    assert!(plan(&d, &o).unwrap().run.is_empty());
    o.databases
        .insert("shop".into(), ("latin1".into(), "latin1_swedish_ci".into()));
    assert_eq!(
        texts(plan(&d, &o)),
        ["ALTER DATABASE `shop` CHARACTER SET `utf8mb4`"]
    );
}

#[test]
fn an_existing_database_or_account_no_declaration_made_is_not_taken_over() {
    let mut o = Observed::default();
    o.databases
        .insert("app".into(), ("utf8mb4".into(), "x".into()));
    o.users
        .insert(("legacy".into(), "%".into()), ObservedUser::default());
    let why = plan(&database("app", false), &o).unwrap_err();
    assert!(
        why.contains("no declaration made it") && why.contains("spec.managed.adopt.databases"),
        "{why}"
    );
    let legacy = DeclaredUser {
        name: "legacy".into(),
        ..user(true)
    };
    let why = plan(&Declared::User(legacy.clone()), &o).unwrap_err();
    assert!(why.contains("spec.managed.adopt.users"), "{why}");
    // Listed for adoption: recorded, and its password set.
    let adopted = plan(
        &Declared::User(DeclaredUser {
            adopt: true,
            set_password: false,
            ..legacy
        }),
        &o,
    )
    .unwrap();
    assert!(adopted.run[0].text.starts_with("INSERT IGNORE"));
    assert!(
        adopted.run[1]
            .text
            .starts_with("ALTER USER 'legacy'@'%' IDENTIFIED BY")
    );
    assert!(adopted.undo.is_empty(), "an adopted account is not undone");
    assert_eq!(
        texts(plan(&database("app", true), &o)),
        [
            "INSERT IGNORE INTO `cnmysql`.`declared_objects` (kind, name, host) VALUES ('database', 'app', '')"
        ]
    );
}

#[test]
fn deletion_never_drops_what_no_declaration_made() {
    let mut o = with_user();
    o.databases
        .insert("app".into(), ("utf8mb4".into(), "x".into()));
    o.databases
        .insert("shop".into(), ("utf8mb4".into(), "x".into()));
    o.users
        .insert(("dba".into(), "%".into()), ObservedUser::default());
    let kept = plan(&Declared::Removal(Removal::Database("app".into())), &o).unwrap();
    assert!(kept.run.is_empty());
    assert!(kept.note.unwrap().contains("was kept"));
    let r = |r| texts(plan(&Declared::Removal(r), &o));
    assert_eq!(
        r(Removal::Database("shop".into()))[0],
        "DROP DATABASE IF EXISTS `shop`"
    );
    assert!(
        r(Removal::User {
            name: "dba".into(),
            host: "%".into()
        })
        .is_empty()
    );
    assert_eq!(
        r(Removal::User {
            name: "shopper".into(),
            host: "%".into()
        })[0],
        "DROP USER IF EXISTS 'shopper'@'%'"
    );
    assert!(r(Removal::Grant(grant(&["SELECT"]))).is_empty());
}

#[test]
fn a_user_is_created_with_its_password_altered_when_it_changes_and_never_logged() {
    let o = Observed::default();
    let s = plan(&Declared::User(user(false)), &o).unwrap().run;
    assert_eq!(s.len(), 2);
    assert!(
        s[1].text
            .starts_with("CREATE USER 'shopper'@'%' IDENTIFIED BY 's3cr''et' REQUIRE SSL WITH"),
        "{}",
        s[1].text
    );
    assert!(
        !s[1].to_string().contains("s3cr"),
        "the password is never shown"
    );
    assert!(!format!("{:?}", user(true)).contains("s3cr"));
    let o = with_user();
    assert!(
        plan(&Declared::User(user(false)), &o)
            .unwrap()
            .run
            .is_empty(),
        "held as declared"
    );
    let s = texts(plan(&Declared::User(user(true)), &o));
    assert!(
        s[0].starts_with("ALTER USER 'shopper'@'%' IDENTIFIED BY"),
        "{s:?}"
    );
    // Changed by hand: put back, the password untouched.
    let mut drifted = with_user();
    drifted
        .users
        .get_mut(&("shopper".into(), "%".into()))
        .unwrap()
        .ssl_type = String::new();
    let s = texts(plan(&Declared::User(user(false)), &drifted));
    assert_eq!(
        s,
        [
            "ALTER USER 'shopper'@'%' REQUIRE SSL WITH MAX_QUERIES_PER_HOUR 0 MAX_UPDATES_PER_HOUR 0 MAX_CONNECTIONS_PER_HOUR 0 MAX_USER_CONNECTIONS 20"
        ]
    );
}

#[test]
fn a_grant_gives_what_is_missing_and_revokes_what_was_added_by_hand() {
    let g = Declared::Grant(grant(&["select", "INSERT"]));
    let waits = plan(&g, &Observed::default()).unwrap_err();
    assert!(waits.contains("'shopper'@'%' does not exist"), "{waits}");
    let mut o = with_user();
    assert_eq!(
        texts(plan(&g, &o)),
        ["GRANT INSERT, SELECT ON `shop`.* TO 'shopper'@'%'"]
    );
    let key = (
        "shopper".to_string(),
        "%".to_string(),
        "shop".to_string(),
        "*".to_string(),
    );
    o.privileges.insert(
        key.clone(),
        (["SELECT", "INSERT"].map(String::from).into(), false),
    );
    assert!(plan(&g, &o).unwrap().run.is_empty());
    o.privileges.insert(
        key.clone(),
        (["SELECT", "DELETE"].map(String::from).into(), true),
    );
    assert_eq!(
        texts(plan(&g, &o)),
        [
            "GRANT INSERT, SELECT ON `shop`.* TO 'shopper'@'%'",
            "REVOKE DELETE ON `shop`.* FROM 'shopper'@'%'",
            "REVOKE GRANT OPTION ON `shop`.* FROM 'shopper'@'%'"
        ]
    );
    // ALL PRIVILEGES: held once every one of the level is.
    let all = Declared::Grant(grant(&["ALL"]));
    o.privileges.insert(
        key,
        (
            DATABASE_PRIVILEGES
                .iter()
                .map(|s| s.to_string())
                .chain(["DELETE HISTORY".into()])
                .collect(),
            false,
        ),
    );
    assert!(plan(&all, &o).unwrap().run.is_empty());
}

use cnmysql_api::sql_privileges::DATABASE_PRIVILEGES;

#[test]
fn a_grant_stays_within_the_applications_databases_whoever_sent_it() {
    let mut o = with_user();
    o.made.insert(Made::Database("my_app".into()));
    for (db, privileges) in [
        ("*", &["ALL PRIVILEGES"][..]),
        ("*", &["INSERT", "UPDATE"][..]),
        ("mysql", &["SELECT", "UPDATE"][..]),
        ("mysq_", &["SELECT"][..]),
        ("cnmysql", &["INSERT"][..]),
        ("shop", &["SUPER"][..]),
        ("shop", &["FILE"][..]),
    ] {
        let why = plan(&Declared::Grant(grant_on(db, privileges)), &o).unwrap_err();
        assert!(
            why.starts_with("refused by the instance manager"),
            "{db}: {why}"
        );
    }
    // A database-level grant names its database literally.
    assert_eq!(
        texts(plan(&Declared::Grant(grant_on("my_app", &["SELECT"])), &o)),
        ["GRANT SELECT ON `my\\_app`.* TO 'shopper'@'%'"]
    );
    // The harmless global privileges on *.
    assert_eq!(
        texts(plan(&Declared::Grant(grant_on("*", &["PROCESS"])), &o)),
        ["GRANT PROCESS ON *.* TO 'shopper'@'%'"]
    );
    // A database no declaration made, or an account none made.
    o.databases
        .insert("billing".into(), ("utf8mb4".into(), "x".into()));
    let why = plan(&Declared::Grant(grant_on("billing", &["SELECT"])), &o).unwrap_err();
    assert!(why.contains("database billing was not made"), "{why}");
    assert!(plan(&Declared::Grant(grant_on("app", &["SELECT"])), &o).is_ok());
    o.users
        .insert(("dba".into(), "%".into()), ObservedUser::default());
    let dba = DeclaredGrant {
        user: "dba".into(),
        ..grant(&["SELECT"])
    };
    let why = plan(&Declared::Grant(dba), &o).unwrap_err();
    assert!(why.contains("'dba'@'%' was not made"), "{why}");
}

#[test]
fn the_managers_check_refuses_reserved_accounts_and_system_databases() {
    let root = DeclaredUser {
        name: "root".into(),
        ..user(true)
    };
    assert!(refusal(&Declared::User(root)).is_some());
    assert!(refusal(&database("performance_schema", true)).is_some());
    assert!(refusal(&Declared::Removal(Removal::Database("mysql".into()))).is_some());
    assert!(
        refusal(&Declared::Removal(Removal::User {
            name: "cnmysql_replication".into(),
            host: "%".into()
        }))
        .is_some()
    );
    let to_app = DeclaredGrant {
        user: "app".into(),
        ..grant(&["SELECT"])
    };
    assert!(refusal(&Declared::Grant(to_app)).is_none());
}

#[test]
fn a_password_digest_changes_with_the_password_and_the_key_and_shows_neither() {
    let d = password_digest("k", "shopper", "%", "pw1");
    assert_eq!(d.len(), 32);
    assert_eq!(d, password_digest("k", "shopper", "%", "pw1"));
    assert_ne!(d, password_digest("k", "shopper", "%", "pw2"));
    assert_ne!(d, password_digest("other", "shopper", "%", "pw1"));
    assert!(!d.contains("pw1"));
}

#[test]
fn declared_objects_wait_while_hibernated_or_paused() {
    let mut st = cnmysql_api::ClusterStatus::default();
    let mut notes = BTreeMap::new();
    assert!(!on_hold(&st, &notes));
    st.hibernated = true;
    assert!(on_hold(&st, &notes));
    st.hibernated = false;
    notes.insert(
        crate::pause::ANNOTATION.to_string(),
        crate::pause::PAUSED.to_string(),
    );
    assert!(on_hold(&st, &notes));
}
