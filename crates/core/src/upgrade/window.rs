//! The maintenance window (`spec.maintenanceWindow`): whether a rollout may
//! restart an instance now, and when it may next.

use cnmysql_api::MaintenanceWindow;

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;

/// Whether the window is open at `now_ms` (Unix ms, UTC); `Err` says when it
/// next opens. No window: always open. A window the API would refuse is
/// treated as always closed, with the reason.
pub fn check(window: Option<&MaintenanceWindow>, now_ms: i64) -> Result<(), String> {
    let Some(w) = window else {
        return Ok(());
    };
    let (start, length) = match (w.start_minute(), w.minutes()) {
        (Ok(s), Ok(l)) => (s * MINUTE_MS, l * MINUTE_MS),
        (Err(e), _) | (_, Err(e)) => {
            return Err(format!(
                "spec.maintenanceWindow is not valid ({e}); no instance is restarted until it is fixed"
            ));
        }
    };
    let opens_on = |day: i64| {
        // 1970-01-01 was a Thursday: Monday = 0.
        let weekday = (day + 3).rem_euclid(7);
        w.days.is_empty() || w.days.iter().any(|d| d.index() == weekday)
    };
    let today = now_ms.div_euclid(DAY_MS);
    // A window that opened yesterday may still be open after midnight.
    for day in [today - 1, today] {
        let open = day * DAY_MS + start;
        if opens_on(day) && (open..open + length).contains(&now_ms) {
            return Ok(());
        }
    }
    let next = (today..today + 8)
        .map(|d| d * DAY_MS + start)
        .find(|&t| t > now_ms && opens_on(t.div_euclid(DAY_MS)))
        .unwrap_or(now_ms);
    Err(format!(
        "outside the maintenance window: it opens at {}",
        crate::time::timestamp(next)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_api::Weekday;

    fn at(text: &str) -> i64 {
        text.parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_millisecond()
    }

    fn window(days: Vec<Weekday>, start: &str, duration: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            days,
            start: start.into(),
            duration: duration.into(),
        }
    }

    #[test]
    fn open_inside_the_window_closed_outside_naming_the_next_opening() {
        // 2026-11-28 is a Saturday.
        let w = window(vec![Weekday::Sat, Weekday::Sun], "02:00", "4h");
        assert_eq!(check(Some(&w), at("2026-11-28T03:00:00Z")), Ok(()));
        assert_eq!(check(Some(&w), at("2026-11-29T05:59:59Z")), Ok(()));
        assert_eq!(
            check(Some(&w), at("2026-11-28T06:00:00Z")),
            Err("outside the maintenance window: it opens at 2026-11-29T02:00:00Z".into())
        );
        assert_eq!(
            check(Some(&w), at("2026-11-24T12:00:00Z")),
            Err("outside the maintenance window: it opens at 2026-11-28T02:00:00Z".into())
        );
        assert_eq!(check(None, 0), Ok(()));
    }

    #[test]
    fn a_window_that_crosses_midnight_stays_open_into_the_next_day() {
        let w = window(vec![Weekday::Fri], "23:00", "3h");
        // 2026-11-27 is a Friday.
        assert_eq!(check(Some(&w), at("2026-11-28T01:30:00Z")), Ok(()));
        assert!(check(Some(&w), at("2026-11-28T02:00:00Z")).is_err());
        let every_day = window(vec![], "23:30", "1h");
        assert_eq!(check(Some(&every_day), at("2026-11-24T00:10:00Z")), Ok(()));
    }
}
