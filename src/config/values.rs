//! The value types of options that are more than a number or a string:
//! a port that can be `off`, a log format, and seconds.
//!
//! Each parses the same from a flag, a variable and the config file, so an
//! option is checked in one place whichever way it was given.

use std::time::Duration;

use serde::Deserialize;

/// A listener port, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PortSetting {
    /// Listen on this port (0 picks a free one).
    Port(u16),
    /// `off`: no listener.
    Named(Off),
}

/// The word `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Off {
    /// No listener.
    Off,
}

impl PortSetting {
    /// The port, or `None` for `off`.
    pub fn port(self) -> Option<u16> {
        match self {
            PortSetting::Port(port) => Some(port),
            PortSetting::Named(Off::Off) => None,
        }
    }
}

impl std::str::FromStr for PortSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(PortSetting::Named(Off::Off)),
            n => n.parse().map(PortSetting::Port).map_err(|_| format!("'{s}' is not a port number or 'off'")),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line.
    Json,
}

/// A non-negative, finite number of seconds (fractions allowed): the one
/// parser of every `*_seconds` option, from a flag, a variable or the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seconds(pub Duration);

impl Seconds {
    /// The seconds as a number (an integer or a fraction).
    ///
    /// # Errors
    /// A negative, infinite or NaN number, or one too large for a duration.
    pub fn from_f64(seconds: f64) -> Result<Self, String> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(format!("must be a number of seconds >= 0, got {seconds}"));
        }
        Duration::try_from_secs_f64(seconds).map(Seconds).map_err(|_| format!("{seconds} seconds is too long"))
    }

    /// The duration, `None` when it is zero (the options where 0 means never).
    pub fn nonzero(self) -> Option<Duration> {
        (!self.0.is_zero()).then_some(self.0)
    }
}

impl std::str::FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let number: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
        Seconds::from_f64(number)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Seconds::from_f64(f64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_the_same_from_text_and_from_toml() {
        #[derive(Deserialize)]
        struct Doc {
            s: Seconds,
        }
        let toml = |text: &str| toml::from_str::<Doc>(text).map(|d| d.s).map_err(|e| e.to_string());
        for (text, millis) in [("0", 0), ("2.5", 2500), ("10", 10_000)] {
            assert_eq!(text.parse::<Seconds>(), Ok(Seconds(Duration::from_millis(millis))), "{text}");
            assert_eq!(toml(&format!("s = {text}")), Ok(Seconds(Duration::from_millis(millis))), "{text}");
        }
        for text in ["-1", "nan", "inf", "1e300"] {
            assert!(text.parse::<Seconds>().is_err(), "{text}");
        }
        assert!(toml("s = -1").expect_err("negative").contains(">= 0"));
        assert!(toml("s = \"5\"").is_err(), "a string is not a number");
        assert_eq!(Seconds(Duration::ZERO).nonzero(), None);
        assert_eq!(Seconds(Duration::from_secs(3)).nonzero(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn ports_take_a_number_or_off() {
        assert_eq!("0".parse::<PortSetting>().map(PortSetting::port), Ok(Some(0)));
        assert_eq!("off".parse::<PortSetting>().map(PortSetting::port), Ok(None));
        assert!("of".parse::<PortSetting>().is_err());
    }
}
