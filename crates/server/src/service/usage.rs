//! The period an account's usage is reported for: UTC days, both ends included, as the
//! app asks for them ([`UsageQuery`]) and as the ledger is read (Unix milliseconds).

use chrono::{DateTime, Days, NaiveDate};
use crosstab_contract::app::{UsageQuery, USAGE_DEFAULT_DAYS, USAGE_MAX_DAYS};

/// UTC days `from..=to`, at most [`USAGE_MAX_DAYS`] of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// The first day.
    pub from: NaiveDate,
    /// The last day.
    pub to: NaiveDate,
}

/// Why a usage query names no period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    /// A day that is not `YYYY-MM-DD` on the calendar.
    #[error("'{parameter}' must be a day as YYYY-MM-DD (such as 2026-01-31), not '{value}'.")]
    NotADay {
        parameter: &'static str,
        value: String,
    },
    /// `from` after `to`.
    #[error("'from' ({from}) is after 'to' ({to}).")]
    Reversed { from: NaiveDate, to: NaiveDate },
    /// This machine's clock is past chrono's calendar (a fault of ours, not the caller's).
    #[error("the clock reads {0} ms, past the calendar")]
    Clock(i64),
    /// More days than one report gives.
    #[error("A report covers at most {USAGE_MAX_DAYS} days; {from} to {to} is {days}.")]
    TooLong {
        from: NaiveDate,
        to: NaiveDate,
        days: i64,
    },
}

impl Period {
    /// The period `query` asks for, on `now_ms`'s UTC day when it names no end.
    pub fn of(query: &UsageQuery, now_ms: i64) -> Result<Period, PeriodError> {
        let to = match &query.to {
            Some(text) => day(text, "to")?,
            None => DateTime::from_timestamp_millis(now_ms)
                .ok_or(PeriodError::Clock(now_ms))?
                .date_naive(),
        };
        let from = match &query.from {
            Some(text) => day(text, "from")?,
            None => to
                .checked_sub_days(Days::new(u64::from(USAGE_DEFAULT_DAYS - 1)))
                .unwrap_or(NaiveDate::MIN),
        };
        if from > to {
            return Err(PeriodError::Reversed { from, to });
        }
        let days = (to - from).num_days() + 1;
        if days > i64::from(USAGE_MAX_DAYS) {
            return Err(PeriodError::TooLong { from, to, days });
        }
        Ok(Period { from, to })
    }

    /// `now_ms`'s UTC day alone.
    pub fn today(now_ms: i64) -> Result<Period, PeriodError> {
        let day = DateTime::from_timestamp_millis(now_ms)
            .ok_or(PeriodError::Clock(now_ms))?
            .date_naive();
        Ok(Period { from: day, to: day })
    }

    /// The ledger times of the period: at or after the first (Unix ms), before the second.
    pub fn millis(&self) -> (i64, i64) {
        let start = |day: NaiveDate| {
            day.and_time(chrono::NaiveTime::MIN)
                .and_utc()
                .timestamp_millis()
        };
        let end = self
            .to
            .checked_add_days(Days::new(1))
            .map_or(i64::MAX, start);
        (start(self.from), end)
    }
}

/// `text` as a day: exactly `YYYY-MM-DD` (chrono alone would also take `2026-1-5`).
fn day(text: &str, parameter: &'static str) -> Result<NaiveDate, PeriodError> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .filter(|day| day.format("%Y-%m-%d").to_string() == text)
        .ok_or_else(|| PeriodError::NotADay {
            parameter,
            value: text.chars().take(32).collect(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const NOON_2026_11_29: i64 = 1_795_953_600_000;

    fn query(from: Option<&str>, to: Option<&str>) -> UsageQuery {
        UsageQuery {
            from: from.map(str::to_owned),
            to: to.map(str::to_owned),
        }
    }

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn today_is_the_clocks_utc_day() {
        let today = Period::today(NOON_2026_11_29).unwrap();
        assert_eq!(
            (today.from, today.to),
            (date("2026-11-29"), date("2026-11-29"))
        );
        let (start, end) = today.millis();
        assert_eq!(end - start, 86_400_000);
        assert!(start <= NOON_2026_11_29 && NOON_2026_11_29 < end);
    }

    #[test]
    fn by_default_today_and_the_thirty_days_before() {
        let period = Period::of(&UsageQuery::default(), NOON_2026_11_29).unwrap();
        assert_eq!(
            (period.from, period.to),
            (date("2026-10-30"), date("2026-11-29"))
        );
        let (start, end) = period.millis();
        assert_eq!(end - start, 31 * 86_400_000);
        assert_eq!(end % 86_400_000, 0);
        assert!(start <= NOON_2026_11_29 && NOON_2026_11_29 < end);
        // A named end day: the 31 days up to it.
        let period = Period::of(&query(None, Some("2026-03-01")), NOON_2026_11_29).unwrap();
        assert_eq!(
            (period.from, period.to),
            (date("2026-01-30"), date("2026-03-01"))
        );
    }

    #[test]
    fn named_days_both_included() {
        let period = Period::of(&query(Some("2024-01-01"), Some("2024-12-31")), 0).unwrap();
        assert_eq!(period.millis(), (1_704_067_200_000, 1_735_689_600_000));
        let one = Period::of(&query(Some("2026-11-29"), Some("2026-11-29")), 0).unwrap();
        let (start, end) = one.millis();
        assert_eq!(end - start, 86_400_000);
    }

    #[test]
    fn refusals_say_why() {
        let refused = |from, to| Period::of(&query(from, to), NOON_2026_11_29).unwrap_err();
        for bad in [
            "2026-1-05",
            "2026-02-30",
            "yesterday",
            "2026-01-01T00:00:00Z",
            "",
        ] {
            assert!(
                matches!(
                    refused(Some(bad), None),
                    PeriodError::NotADay {
                        parameter: "from",
                        ..
                    }
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            refused(None, Some("2026/11/29")),
            PeriodError::NotADay {
                parameter: "to",
                ..
            }
        ));
        assert!(matches!(
            refused(Some("2026-11-30"), Some("2026-11-29")),
            PeriodError::Reversed { .. }
        ));
        // 366 days (a leap year) is the most; 367 is refused.
        assert!(Period::of(&query(Some("2024-01-01"), Some("2024-12-31")), 0).is_ok());
        let long = refused(Some("2024-01-01"), Some("2025-01-01"));
        assert_eq!(
            long.to_string(),
            "A report covers at most 366 days; 2024-01-01 to 2025-01-01 is 367."
        );
        // A `from` after today with no `to` ends after it starts: refused, not empty.
        assert!(matches!(
            refused(Some("2026-12-01"), None),
            PeriodError::Reversed { .. }
        ));
    }
}
