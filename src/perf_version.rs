//! Which perf's `perf stat` output bperf stat prints: perf 7.2's (the default) or perf
//! 6.12's, chosen with `--perf-version` or, for a whole script, `BPERF_PERF_VERSION`.
//! Only stat's output, events and exit statuses depend on it; report, serve and top do
//! not.

use std::fmt;

/// The environment variable that chooses the version when --perf-version does not.
pub(crate) const ENV: &str = "BPERF_PERF_VERSION";

/// A perf whose stat output bperf reproduces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PerfVersion {
    /// perf 6.12: metrics computed by perf itself (`CPUs utilized`, `/sec`, `GHz`).
    V6_12,
    /// perf 7.2: the default events and metrics from perf's JSON metric definitions.
    #[default]
    V7_2,
}

/// A version bperf does not reproduce, in one line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "perf version '{asked}'{}: bperf prints perf 7.2's or perf 6.12's output (7.2 or 6.12)",
    if *.from_env { " (from BPERF_PERF_VERSION)" } else { "" }
)]
pub struct UnknownVersion {
    pub asked: String,
    /// Asked for in BPERF_PERF_VERSION, not with the option.
    pub from_env: bool,
}

impl std::str::FromStr for PerfVersion {
    type Err = UnknownVersion;

    /// `6.12` or `7.2`, with or without a patch level (`7.2.13`) or a `v`.
    fn from_str(s: &str) -> Result<PerfVersion, UnknownVersion> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let major_minor = (parts.next(), parts.next());
        let patch_ok = parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        match major_minor {
            (Some("6"), Some("12")) if patch_ok => Ok(PerfVersion::V6_12),
            (Some("7"), Some("2")) if patch_ok => Ok(PerfVersion::V7_2),
            _ => Err(UnknownVersion {
                asked: s.to_string(),
                from_env: false,
            }),
        }
    }
}

impl fmt::Display for PerfVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PerfVersion::V6_12 => "6.12",
            PerfVersion::V7_2 => "7.2",
        })
    }
}

impl PerfVersion {
    /// The version asked for: the option's, else the environment's (`env`, the value of
    /// BPERF_PERF_VERSION; empty counts as unset), else 7.2's.
    pub(crate) fn chosen(
        option: Option<PerfVersion>,
        env: Option<&str>,
    ) -> Result<PerfVersion, UnknownVersion> {
        if let Some(v) = option {
            return Ok(v);
        }
        match env.filter(|s| !s.is_empty()) {
            Some(s) => s.parse().map_err(|e| UnknownVersion {
                from_env: true,
                ..e
            }),
            None => Ok(PerfVersion::default()),
        }
    }

    /// The version the environment asks for (7.2's when it asks for none).
    pub(crate) fn from_env() -> Result<PerfVersion, UnknownVersion> {
        let env = std::env::var_os(ENV).map(|s| s.to_string_lossy().into_owned());
        PerfVersion::chosen(None, env.as_deref())
    }

    /// What perf exits with after refusing a combination of options it has read
    /// (-EINVAL): perf 6.12 returns it from main (234); perf 7.2 exits with its absolute
    /// value (22).
    pub fn invalid_status(self) -> u8 {
        match self {
            PerfVersion::V6_12 => 234,
            PerfVersion::V7_2 => 22,
        }
    }

    /// Whether perf computes its own metrics beside each event (6.12: `CPUs utilized`,
    /// `GHz`, `insn per cycle`, `/sec`), rather than only those of metric definitions.
    pub(crate) fn builtin_metrics(self) -> bool {
        self == PerfVersion::V6_12
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_a_patch_level() {
        for (s, v) in [
            ("6.12", PerfVersion::V6_12),
            ("6.12.57", PerfVersion::V6_12),
            ("7.2", PerfVersion::V7_2),
            ("v7.2.13", PerfVersion::V7_2),
        ] {
            assert_eq!(s.parse(), Ok(v), "{s}");
        }
        for s in ["", "6", "6.1", "7.20", "7.2.", "7.2.x", "latest"] {
            assert!(s.parse::<PerfVersion>().is_err(), "{s}");
        }
    }

    #[test]
    fn the_option_wins_over_the_environment() {
        let chosen = PerfVersion::chosen;
        assert_eq!(chosen(None, None), Ok(PerfVersion::V7_2));
        assert_eq!(chosen(None, Some("")), Ok(PerfVersion::V7_2));
        assert_eq!(chosen(None, Some("6.12")), Ok(PerfVersion::V6_12));
        assert_eq!(
            chosen(Some(PerfVersion::V7_2), Some("6.12")),
            Ok(PerfVersion::V7_2)
        );
        let e = chosen(None, Some("5.10")).unwrap_err().to_string();
        assert_eq!(
            e,
            "perf version '5.10' (from BPERF_PERF_VERSION): bperf prints perf 7.2's or perf 6.12's output (7.2 or 6.12)"
        );
        let e = "5.10".parse::<PerfVersion>().unwrap_err().to_string();
        assert_eq!(
            e,
            "perf version '5.10': bperf prints perf 7.2's or perf 6.12's output (7.2 or 6.12)"
        );
    }
}
