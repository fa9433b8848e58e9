//! `Timestamp`: a point in time as certificates write it, RFC 3339 in UTC with whole seconds
//! (`2026-11-02T09:30:00Z`).
//!
//! One spelling per instant keeps signed documents canonical: reading accepts only the exact
//! form [`Timestamp::to_rfc3339`] writes. User input (`--expires`) is more forgiving: any RFC 3339
//! offset is accepted and converted to UTC, but fractions of a second are refused rather than
//! silently dropped.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// An instant with whole-second precision, always in UTC.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

/// Why a time could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// Not RFC 3339 at all.
    #[error("{0:?} is not an RFC 3339 date-time (like 2026-11-02T09:30:00Z)")]
    NotRfc3339(String),
    /// RFC 3339 but with fractional seconds.
    #[error("{0:?} has a fraction of a second; use whole seconds")]
    Fraction(String),
    /// RFC 3339 but not the one canonical spelling (UTC, `Z`, whole seconds).
    #[error("{0:?} is not written as UTC with whole seconds (like 2026-11-02T09:30:00Z)")]
    NotCanonical(String),
    /// Outside the years RFC 3339 can write (0000-9999).
    #[error("the time is outside the years RFC 3339 can write")]
    OutOfRange,
}

impl Timestamp {
    /// The current time, truncated to whole seconds.
    pub fn now() -> Timestamp {
        Timestamp::from_datetime(OffsetDateTime::now_utc())
    }

    /// Convert any instant to UTC and drop the fraction of a second.
    pub fn from_datetime(t: OffsetDateTime) -> Timestamp {
        let utc = t.to_offset(UtcOffset::UTC);
        Timestamp(utc.replace_nanosecond(0).unwrap_or(utc))
    }

    /// The instant as a `time` value (UTC).
    pub fn datetime(&self) -> OffsetDateTime {
        self.0
    }

    /// Parse user input: any RFC 3339 offset, whole seconds.
    pub fn parse_user(text: &str) -> Result<Timestamp, TimeError> {
        let t = OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|_| TimeError::NotRfc3339(text.to_owned()))?;
        if t.nanosecond() != 0 {
            return Err(TimeError::Fraction(text.to_owned()));
        }
        let ts = Timestamp::from_datetime(t);
        ts.to_rfc3339()?;
        Ok(ts)
    }

    /// Parse the canonical spelling only (as stored in signed documents).
    pub fn parse_canonical(text: &str) -> Result<Timestamp, TimeError> {
        let ts = Timestamp::parse_user(text)?;
        if ts.to_rfc3339()? != text {
            return Err(TimeError::NotCanonical(text.to_owned()));
        }
        Ok(ts)
    }

    /// The canonical spelling: `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn to_rfc3339(&self) -> Result<String, TimeError> {
        self.0.format(&Rfc3339).map_err(|_| TimeError::OutOfRange)
    }

    /// This instant plus `days` days, or `None` past the end of the representable range.
    pub fn plus_days(&self, days: i64) -> Option<Timestamp> {
        self.0
            .checked_add(time::Duration::days(days))
            .map(Timestamp)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_rfc3339() {
            Ok(s) => f.write_str(&s),
            Err(_) => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = self.to_rfc3339().map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse_canonical(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_input_is_converted_to_utc() {
        let t = Timestamp::parse_user("2027-01-01T02:00:00+02:00").unwrap();
        assert_eq!(t.to_rfc3339().unwrap(), "2027-01-01T00:00:00Z");
        assert_eq!(
            Timestamp::parse_canonical("2027-01-01T00:00:00Z").unwrap(),
            t
        );
    }

    #[test]
    fn rejects_fractions_and_other_spellings_in_documents() {
        assert_eq!(
            Timestamp::parse_user("2027-01-01T00:00:00.5Z"),
            Err(TimeError::Fraction("2027-01-01T00:00:00.5Z".into()))
        );
        assert!(matches!(
            Timestamp::parse_canonical("2027-01-01T00:00:00+00:00"),
            Err(TimeError::NotCanonical(_))
        ));
        assert!(matches!(
            Timestamp::parse_canonical("2027-01-01t00:00:00z"),
            Err(TimeError::NotCanonical(_))
        ));
        assert!(matches!(
            Timestamp::parse_user("next tuesday"),
            Err(TimeError::NotRfc3339(_))
        ));
        assert!(matches!(
            Timestamp::parse_user("2027-01-01"),
            Err(TimeError::NotRfc3339(_))
        ));
    }

    #[test]
    fn plus_days_adds_whole_days() {
        let t = Timestamp::parse_canonical("2026-11-02T09:30:00Z").unwrap();
        assert_eq!(
            t.plus_days(90).unwrap().to_rfc3339().unwrap(),
            "2027-01-31T09:30:00Z"
        );
    }
}
