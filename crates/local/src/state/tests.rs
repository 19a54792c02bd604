use super::*;

#[test]
fn an_unreadable_status_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = StateDir::new(tmp.path().to_path_buf());
    dir.write_status(&ClusterStatus::default()).unwrap();
    dir.update_status(|s| s.current_primary = Some("db-1".into()))
        .unwrap();
    // A corrupt status (a torn copy, a full disk) must not be replaced
    // by an empty one: that would forget the primary.
    std::fs::write(dir.status_file(), "{\"currentPrimary\": \"db-").unwrap();
    let err = dir
        .update_status(|s| s.target_primary = Some("db-2".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be read"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.status_file()).unwrap(),
        "{\"currentPrimary\": \"db-"
    );
}

#[test]
fn hints_name_the_cluster_unless_its_directory_was_chosen() {
    assert_eq!(
        StateDir::new(default_state_dir("db")).cli_target("db"),
        "db"
    );
    let d = StateDir::new(PathBuf::from("/srv/db-state"));
    assert_eq!(d.cli_target("db"), "--state-dir /srv/db-state");
}

#[test]
fn a_missing_status_is_not_recreated_empty() {
    // Deleted by hand, or caught between a remove and a write: an
    // update must fail rather than start a cluster with no primary.
    let tmp = tempfile::tempdir().unwrap();
    let dir = StateDir::new(tmp.path().to_path_buf());
    let err = dir
        .update_status(|s| s.phase_reason = Some("report".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("status.json"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!dir.status_file().exists());
}
