//! `strftime_now(format)`, which Hugging Face templates (Llama 3.x) call for
//! today's date. The clock is read in UTC: the machine's time zone is not
//! consulted, so near midnight the date can differ from the local one.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A UTC calendar time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DateTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday
    pub weekday: u32,
    /// 1..=366
    pub yday: u32,
}

impl DateTime {
    /// The calendar time `secs` seconds after 1970-01-01T00:00:00Z.
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Civil date from a day count, with years starting in March so that
        // the leap day falls at the end (Howard Hinnant's method).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        const BEFORE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = BEFORE[month as usize - 1] + day + u32::from(leap && month > 2);
        DateTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            // 1970-01-01 was a Thursday.
            weekday: (days + 3).rem_euclid(7) as u32,
            yday,
        }
    }

    /// The current UTC time.
    pub fn now() -> DateTime {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        DateTime::from_unix(secs)
    }

    /// C `strftime` for the common directives (`%Y %m %d %e %H %I %M %S %p
    /// %y %B %b %h %A %a %j %F %T %%`); others are copied as written.
    pub fn format(&self, fmt: &str) -> String {
        let mut out = String::with_capacity(fmt.len() + 16);
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            let month = MONTHS[self.month as usize - 1];
            let weekday = WEEKDAYS[self.weekday as usize];
            let _ = match d {
                'Y' => write!(out, "{}", self.year),
                'y' => write!(out, "{:02}", self.year.rem_euclid(100)),
                'm' => write!(out, "{:02}", self.month),
                'd' => write!(out, "{:02}", self.day),
                'e' => write!(out, "{:2}", self.day),
                'H' => write!(out, "{:02}", self.hour),
                'I' => write!(out, "{:02}", (self.hour + 11) % 12 + 1),
                'p' => write!(out, "{}", if self.hour < 12 { "AM" } else { "PM" }),
                'M' => write!(out, "{:02}", self.minute),
                'S' => write!(out, "{:02}", self.second),
                'B' => write!(out, "{month}"),
                'b' | 'h' => write!(out, "{}", &month[..3]),
                'A' => write!(out, "{weekday}"),
                'a' => write!(out, "{}", &weekday[..3]),
                'j' => write!(out, "{:03}", self.yday),
                'F' => write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day),
                'T' => write!(
                    out,
                    "{:02}:{:02}:{:02}",
                    self.hour, self.minute, self.second
                ),
                '%' => write!(out, "%"),
                other => write!(out, "%{other}"),
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::DateTime;

    #[test]
    fn known_dates() {
        let d = DateTime::from_unix(0);
        assert_eq!(
            d.format("%Y-%m-%d %H:%M:%S %A %j"),
            "1970-01-01 00:00:00 Thursday 001"
        );
        // 2024-02-29T13:05:09Z, a leap day (a Thursday).
        let d = DateTime::from_unix(1_709_211_909);
        assert_eq!(d.format("%d %b %Y"), "29 Feb 2024");
        assert_eq!(
            d.format("%B %e, %y %I:%M %p %a %j %%"),
            "February 29, 24 01:05 PM Thu 060 %"
        );
        // 2000-12-31T23:59:59Z: day 366 of a leap century year.
        let d = DateTime::from_unix(978_307_199);
        assert_eq!(d.format("%F %T %j %Q"), "2000-12-31 23:59:59 366 %Q");
        // Before the epoch: 1969-12-31T23:59:59Z, a Wednesday.
        assert_eq!(
            DateTime::from_unix(-1).format("%F %T %A"),
            "1969-12-31 23:59:59 Wednesday"
        );
    }
}
