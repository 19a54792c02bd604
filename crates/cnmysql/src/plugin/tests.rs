use super::*;

#[test]
fn a_session_opens_on_the_primary_or_a_replica_in_service() {
    let state = |role: &str, ready: bool| cnmysql_api::InstanceState {
        role: role.into(),
        ready,
        ..Default::default()
    };
    let mut st = cnmysql_api::ClusterStatus {
        current_primary: Some("db-1".into()),
        ..Default::default()
    };
    st.instance_states = [
        ("db-1".to_string(), state("primary", true)),
        ("db-2".to_string(), state("replica", true)),
        ("db-3".to_string(), state("replica", true)),
    ]
    .into();
    assert_eq!(session_instance(&st, None, false).unwrap(), "db-1");
    assert_eq!(session_instance(&st, None, true).unwrap(), "db-2");
    st.lagging_instances = vec!["db-2".into()];
    assert_eq!(session_instance(&st, None, true).unwrap(), "db-3");
    st.fenced_instances = vec!["db-3".into()];
    assert!(session_instance(&st, None, true).is_err());
    assert_eq!(
        session_instance(&st, Some("db-2".into()), true).unwrap(),
        "db-2"
    );
    st.current_primary = None;
    let e = session_instance(&st, None, false).unwrap_err();
    assert!(e.to_string().contains("no primary"), "{e}");
}
