//! When a `ScheduledBackup` is due: its cron schedule (UTC; five fields,
//! or six with seconds first), `immediate` and `suspend`. Shared by the
//! operator's controller and the local control plane.

use croner::parser::{CronParser, Seconds};

/// The next time `schedule` fires after `after`.
pub fn next_time(schedule: &str, after: jiff::Timestamp) -> Result<jiff::Timestamp, String> {
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(schedule)
        .map_err(|e| {
            format!("spec.schedule: {schedule:?} is not a cron schedule: {e}; write five fields like 0 3 * * *")
        })?;
    let from = after.to_zoned(jiff::tz::TimeZone::UTC);
    let next = cron
        .find_next_occurrence(&from, false)
        .map_err(|e| format!("spec.schedule: {schedule:?} never fires: {e}"))?;
    Ok(next.timestamp())
}

/// When the next backup is due: at once when `immediate` and none was
/// taken, else the schedule's next time after the last one (or after the
/// schedule was made). None while suspended.
pub fn due(
    schedule: &str,
    immediate: bool,
    suspend: bool,
    created: jiff::Timestamp,
    last: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Result<Option<jiff::Timestamp>, String> {
    if suspend {
        return Ok(None);
    }
    Ok(Some(match last {
        None if immediate => now,
        None => next_time(schedule, created)?,
        Some(l) => next_time(schedule, l)?,
    }))
}

/// What a schedule asks for now: the one decision both platforms'
/// schedulers act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Suspended: nothing is due.
    Suspended,
    /// The next backup is due then.
    Wait(jiff::Timestamp),
    /// A backup is due now, for the time `at`; the one after it at `next`.
    Due {
        at: jiff::Timestamp,
        next: Option<jiff::Timestamp>,
    },
}

/// See [`Plan`]; `created` is when the schedule was made (or first seen),
/// `last` when the last backup it made was due. An error names
/// `spec.schedule` when the schedule cannot be read.
pub fn plan(
    schedule: &str,
    immediate: bool,
    suspend: bool,
    created: jiff::Timestamp,
    last: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Result<Plan, String> {
    let Some(at) = due(schedule, immediate, suspend, created, last, now)? else {
        return Ok(Plan::Suspended);
    };
    if at > now {
        return Ok(Plan::Wait(at));
    }
    Ok(Plan::Due {
        at,
        next: next_time(schedule, at).ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_fire_at_their_next_time_and_bad_ones_are_named() {
        let t: jiff::Timestamp = "2026-11-24T20:10:30Z".parse().unwrap();
        assert_eq!(
            next_time("0 3 * * *", t).unwrap().to_string(),
            "2026-11-25T03:00:00Z"
        );
        assert_eq!(
            next_time("*/15 * * * *", t).unwrap().to_string(),
            "2026-11-24T20:15:00Z"
        );
        assert_eq!(
            next_time("30 * * * * *", t).unwrap().to_string(),
            "2026-11-24T20:11:30Z"
        );
        let e = next_time("every day", t).unwrap_err();
        assert!(e.contains("spec.schedule"), "{e}");
        assert_eq!(due("0 3 * * *", true, false, t, None, t).unwrap(), Some(t));
        assert_eq!(due("0 3 * * *", true, true, t, None, t).unwrap(), None);
        let last: jiff::Timestamp = "2026-11-25T03:00:00Z".parse().unwrap();
        assert_eq!(
            due("0 3 * * *", true, false, t, Some(last), t)
                .unwrap()
                .unwrap()
                .to_string(),
            "2026-11-26T03:00:00Z"
        );
    }

    #[test]
    fn a_schedule_waits_is_due_or_is_suspended() {
        let made: jiff::Timestamp = "2026-11-24T20:10:30Z".parse().unwrap();
        let at: jiff::Timestamp = "2026-11-25T03:00:00Z".parse().unwrap();
        let before = at - jiff::SignedDuration::from_secs(1);
        let after = at + jiff::SignedDuration::from_secs(5);
        assert_eq!(
            plan("0 3 * * *", false, false, made, None, before),
            Ok(Plan::Wait(at))
        );
        // Due for the time it was due, however late it is noticed; the
        // next one a day on.
        let next = "2026-11-26T03:00:00Z".parse().ok();
        assert_eq!(
            plan("0 3 * * *", false, false, made, None, after),
            Ok(Plan::Due { at, next })
        );
        assert_eq!(
            plan("0 3 * * *", false, true, made, None, after),
            Ok(Plan::Suspended)
        );
        // Taken: the next one waits.
        assert_eq!(
            plan("0 3 * * *", false, false, made, Some(at), after),
            Ok(Plan::Wait(next.unwrap()))
        );
        assert!(
            plan("nightly", false, false, made, None, after)
                .unwrap_err()
                .contains("spec.schedule")
        );
    }
}
