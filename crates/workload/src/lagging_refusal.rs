//! A switchover refused because its target lags (`TargetLagging`), as
//! the fault suites read it.

/// What a refused switchover says when its target is behind
/// (`TargetLagging`): `Some(Some(r))` when it names `r` as caught up (a
/// suite then switches over to `r`, as a user would), `Some(None)` when
/// no replica is, `None` for any other answer.
pub fn lagging_refusal(said: &str) -> Option<Option<String>> {
    if !said.contains("(TargetLagging)") {
        return None;
    }
    if said.contains("no replica is caught up") {
        return Some(None);
    }
    let instead = said.find(" is caught up").map(|at| {
        said[..at]
            .rsplit(|c: char| c.is_whitespace() || c == ';')
            .next()
            .unwrap_or_default()
            .to_string()
    });
    Some(instead)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lagging_refusal_names_the_replica_to_use_instead() {
        let said = "error: switchover to db-3 refused (TargetLagging): db-3 is 3 s behind the primary (a switchover waits for its target to apply everything, and more than 2 s is a backlog, not a moment); db-1 is caught up: switch over to it instead\n";
        assert_eq!(super::lagging_refusal(said), Some(Some("db-1".into())));
        let said = "switchover to db-3 refused (TargetLagging): db-3 is 9 s behind the primary (...); no replica is caught up: ask again once one is";
        assert_eq!(super::lagging_refusal(said), Some(None));
        assert_eq!(super::lagging_refusal("refused (TargetFenced): x"), None);
    }
}
