//! Dynamic PMUs described in sysfs (`<root>/<pmu>/type`, `format/*`, `events/*`) and
//! the `pmu/term=value,.../` terms that encode into config, config1 and config2.

use anyhow::{anyhow, bail, Context, Result};

/// Which attr word a format field or a raw term writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    Config,
    Config1,
    Config2,
}

/// A named format field: its value is spread over these bit ranges, low bits first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatField {
    pub name: String,
    pub word: Word,
    /// Inclusive (low, high) bit ranges.
    pub ranges: Vec<(u32, u32)>,
}

impl FormatField {
    /// Parses a sysfs format file's content: `config:0-7`, `config1:0-63`,
    /// `config:0-7,32-35`, `config:21`.
    pub fn parse(name: &str, spec: &str) -> Result<FormatField> {
        let spec = spec.trim();
        let (word, bits) = spec
            .split_once(':')
            .ok_or_else(|| anyhow!("format '{name}': no ':' in '{spec}'"))?;
        let word = match word {
            "config" => Word::Config,
            "config1" => Word::Config1,
            "config2" => Word::Config2,
            w => bail!("format '{name}': unknown attr word '{w}'"),
        };
        let mut ranges = vec![];
        for r in bits.split(',') {
            let (lo, hi) = match r.split_once('-') {
                Some((lo, hi)) => (lo.trim().parse::<u32>()?, hi.trim().parse::<u32>()?),
                None => {
                    let b = r.trim().parse::<u32>()?;
                    (b, b)
                }
            };
            if lo > hi || hi > 63 {
                bail!("format '{name}': bad bit range '{r}'");
            }
            ranges.push((lo, hi));
        }
        Ok(FormatField {
            name: name.to_string(),
            word,
            ranges,
        })
    }

    /// The sysfs spelling back: `config:0-7,32-35`.
    pub(crate) fn describe(&self) -> String {
        let word = match self.word {
            Word::Config => "config",
            Word::Config1 => "config1",
            Word::Config2 => "config2",
        };
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        format!("{word}:{}", ranges.join(","))
    }

    pub fn width(&self) -> u32 {
        self.ranges.iter().map(|(lo, hi)| hi - lo + 1).sum()
    }

    /// Spreads `value` over the ranges. Errors when it has more bits than the field.
    pub(crate) fn encode(&self, value: u64) -> Result<u64, u64> {
        let width = self.width();
        let max = if width >= 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        if value > max {
            return Err(max);
        }
        let (mut out, mut v) = (0u64, value);
        for &(lo, hi) in &self.ranges {
            let n = hi - lo + 1;
            let mask = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
            out |= (v & mask) << lo;
            v = if n >= 64 { 0 } else { v >> n };
        }
        Ok(out)
    }
}

/// A PMU under /sys/bus/event_source/devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pmu {
    pub name: String,
    pub type_: u32,
    pub formats: Vec<FormatField>,
    /// Named events: (alias, its terms as written in sysfs, e.g. `event=0x3c`).
    pub aliases: Vec<(String, String)>,
    /// A core PMU, one that counts the CPUs' own events: `cpu`, or one with a `cpus`
    /// file (each core type of a hybrid machine has its own, as has an arm64 CPU PMU).
    pub core: bool,
    /// The CPUs it counts on, from its `cpumask` or `cpus` file; None: any CPU.
    pub cpus: Option<Vec<u32>>,
}

impl Pmu {
    /// A PMU from what sysfs says of it: its `type` file, and the files of its
    /// `format` and `events` directories as (name, content).
    pub(crate) fn from_files(
        name: &str,
        type_file: &str,
        formats: &[(String, String)],
        events: &[(String, String)],
    ) -> Result<Pmu> {
        let type_ = type_file
            .trim()
            .parse()
            .with_context(|| format!("PMU {name}: type '{}' is not a number", type_file.trim()))?;
        let formats = formats
            .iter()
            .map(|(f, spec)| FormatField::parse(f, spec))
            .collect::<Result<_>>()?;
        let mut aliases: Vec<(String, String)> = events
            .iter()
            // .scale, .unit, .per-pkg and .snapshot describe an event; they are not events.
            .filter(|(n, _)| !n.contains('.'))
            .map(|(n, s)| (n.clone(), s.trim().to_string()))
            .collect();
        aliases.sort();
        Ok(Pmu {
            name: name.to_string(),
            type_,
            formats,
            aliases,
            core: false,
            cpus: None,
        })
    }

    pub fn format(&self, name: &str) -> Option<&FormatField> {
        self.formats.iter().find(|f| f.name == name)
    }

    pub(crate) fn alias(&self, name: &str) -> Option<&str> {
        self.aliases
            .iter()
            .find(|(n, _)| n == name || n.eq_ignore_ascii_case(name))
            .map(|(_, t)| t.as_str())
    }

    /// The attr a term list gives on this PMU, and its `name=` term if any. A core PMU
    /// also takes a hardware or cache event's name that is not one of its own events
    /// (`cpu_core/cycles/`, `cpu_atom/L1-dcache-loads/`), as perf does: the attr is then
    /// that legacy event's, without the PMU's type in it (see [`super::Sources::extended_type`]).
    pub(crate) fn encode(&self, terms: &str) -> Result<(super::Attr, Option<String>)> {
        let mut e = Encoded::default();
        encode_into(self, terms, &mut e, 0)?;
        let [config, config1, config2] = e.words;
        let (type_, config) = e.legacy.unwrap_or((self.type_, config));
        let attr = super::Attr {
            type_,
            config,
            config1,
            config2,
            ..super::Attr::default()
        };
        Ok((attr, e.name))
    }

    /// The term names this PMU accepts, for error messages.
    pub(crate) fn valid_terms(&self) -> String {
        let mut v: Vec<&str> = vec!["config", "config1", "config2", "name", "period"];
        v.extend(self.formats.iter().map(|f| f.name.as_str()));
        v.join(",")
    }
}

/// perf's order of PMU names: by the name without a `_N` suffix (decimal, or hex of
/// more than two digits), then by the suffix's value: `armv8_cortex_a55` before
/// `armv8_cortex_a76` and `armv8_cortex_a78` before `armv8_cortex_a510`. Names perf
/// finds equal go by their spelling.
pub fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (sa, na) = split_suffix(a);
    let (sb, nb) = split_suffix(b);
    let n = sa.len().min(sb.len());
    let prefix = a.as_bytes()[..n].cmp(&b.as_bytes()[..n]);
    let perf = match (sa.len() == sb.len(), prefix) {
        (true, std::cmp::Ordering::Equal) if !sa.is_empty() => na.cmp(&nb),
        _ => prefix,
    };
    perf.then_with(|| a.cmp(b))
}

/// A PMU name without its `_N` suffix, and the suffix's value (perf reads it as hex;
/// 0 without one).
fn split_suffix(name: &str) -> (&str, u64) {
    let digits = name
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    let len = name.len() - digits;
    let suffix = &name[len..];
    let hex = suffix.bytes().any(|b| !b.is_ascii_digit());
    if digits == 0 || len == 0 || !name[..len].ends_with('_') || hex && digits <= 2 {
        return (name, 0);
    }
    let value = u64::from_str_radix(suffix, 16).unwrap_or(u64::MAX);
    (&name[..len - 1], value)
}

/// Parses a number the way perf does in terms: decimal or 0x-hex.
pub(crate) fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) if !h.is_empty() => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        None => None,
    }
}

/// Encodes a term list (`event=0x3c,umask=1,edge`, or an alias name among them) for
/// `pmu`. Returns the words and the `name=` term if one was given.
#[cfg(test)]
pub(crate) fn encode_terms(pmu: &Pmu, terms: &str) -> Result<(u64, u64, u64, Option<String>)> {
    let mut e = Encoded::default();
    encode_into(pmu, terms, &mut e, 0)?;
    Ok((e.words[0], e.words[1], e.words[2], e.name))
}

/// What a term list sets.
#[derive(Default)]
struct Encoded {
    /// config, config1, config2.
    words: [u64; 3],
    /// The `name=` term.
    name: Option<String>,
    /// A legacy hardware or cache event named on a core PMU: its type and config.
    legacy: Option<(u32, u64)>,
}

/// The hardware or cache event a term names, as (type, config).
fn legacy_event(term: &str) -> Option<(u32, u64)> {
    use super::symbols::{cache_config, lookup, HARDWARE, TYPE_HARDWARE, TYPE_HW_CACHE};
    lookup(HARDWARE, term)
        .map(|c| (TYPE_HARDWARE, c))
        .or_else(|| cache_config(term).map(|c| (TYPE_HW_CACHE, c)))
}

fn encode_into(pmu: &Pmu, terms: &str, e: &mut Encoded, depth: u32) -> Result<()> {
    if terms.trim().is_empty() {
        return Ok(());
    }
    for term in terms.split(',') {
        let term = term.trim();
        if term.is_empty() {
            bail!("empty term in '{terms}'");
        }
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (term, None),
        };
        if key == "name" {
            e.name = Some(value.unwrap_or_default().to_string());
            continue;
        }
        // Terms that set how an event samples: no effect on counting.
        if matches!(
            key,
            "period" | "freq" | "call-graph" | "stack-size" | "time" | "metric-id"
        ) {
            continue;
        }
        let num = || match value {
            None => Ok(1),
            Some(v) => parse_num(v).ok_or_else(|| anyhow!("'{v}' is not a number (term '{term}')")),
        };
        let raw = ["config", "config1", "config2"]
            .iter()
            .position(|w| *w == key);
        if let Some(i) = raw {
            e.words[i] = num()?;
        } else if let Some(f) = pmu.format(key) {
            set_field(pmu, f, num()?, &mut e.words)?;
        } else if let (None, Some(alias)) = (value, pmu.alias(key)) {
            if depth > 2 {
                bail!("alias '{key}' of PMU '{}' refers to itself", pmu.name);
            }
            // An alias expands in place: its terms, then the rest of the list.
            encode_into(pmu, alias, e, depth + 1)?;
        } else if let (None, true, Some(legacy)) = (value, pmu.core, legacy_event(key)) {
            e.legacy = Some(legacy);
        } else {
            bail!(
                "unknown term '{key}' for PMU '{}' (valid terms: {})",
                pmu.name,
                pmu.valid_terms()
            );
        }
    }
    Ok(())
}

/// Sets format field `f` of `pmu` to `v` in the attr words. A field overrides the bits
/// it covers, so later terms win, as in perf.
fn set_field(pmu: &Pmu, f: &FormatField, v: u64, words: &mut [u64; 3]) -> Result<()> {
    let bits = f.encode(v).map_err(|max| {
        anyhow!(
            "value {v:#x} too big for format field '{}' of PMU '{}' (maximum {max:#x})",
            f.name,
            pmu.name
        )
    })?;
    let i = match f.word {
        Word::Config => 0,
        Word::Config1 => 1,
        Word::Config2 => 2,
    };
    let mask = f
        .encode(u64::MAX >> (64 - f.width().min(64)))
        .unwrap_or(u64::MAX);
    words[i] = (words[i] & !mask) | bits;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intel_cpu() -> Pmu {
        Pmu {
            name: "cpu".into(),
            type_: 4,
            formats: vec![
                FormatField::parse("event", "config:0-7").unwrap(),
                FormatField::parse("umask", "config:8-15").unwrap(),
                FormatField::parse("edge", "config:18").unwrap(),
                FormatField::parse("inv", "config:23").unwrap(),
                FormatField::parse("cmask", "config:24-31").unwrap(),
                FormatField::parse("ldlat", "config1:0-15").unwrap(),
                FormatField::parse("split", "config:0-3,32-35").unwrap(),
            ],
            aliases: vec![("cpu-cycles".into(), "event=0x3c".into())],
            core: true,
            cpus: None,
        }
    }

    #[test]
    fn format_files_parse() {
        let f = FormatField::parse("x", "config:0-7,32-35\n").unwrap();
        assert_eq!(f.ranges, vec![(0, 7), (32, 35)]);
        assert_eq!(f.describe(), "config:0-7,32-35");
        assert_eq!(
            FormatField::parse("e", "config:18").unwrap().describe(),
            "config:18"
        );
        assert_eq!(f.width(), 12);
        assert!(FormatField::parse("x", "config3:0-7").is_err());
        assert!(FormatField::parse("x", "config:9-3").is_err());
        assert!(FormatField::parse("x", "config:0-64").is_err());
    }

    #[test]
    fn values_spread_over_ranges() {
        let f = FormatField::parse("split", "config:0-3,32-35").unwrap();
        assert_eq!(f.width(), 8);
        assert_eq!(f.encode(0xab), Ok(0xa_0000_000b));
        assert_eq!(f.encode(0x100), Err(0xff));
        let full = FormatField::parse("all", "config:0-63").unwrap();
        assert_eq!(full.encode(u64::MAX), Ok(u64::MAX));
    }

    #[test]
    fn terms_encode() {
        let p = intel_cpu();
        let e = |t: &str| encode_terms(&p, t).map(|(c, c1, c2, _)| (c, c1, c2));
        assert_eq!(e("event=0x3c,umask=1").unwrap(), (0x13c, 0, 0));
        assert_eq!(e("event=0xc0,edge,inv,cmask=2").unwrap(), (0x28400c0, 0, 0));
        assert_eq!(e("ldlat=30,config2=7").unwrap(), (0, 30, 7));
        assert_eq!(e("cpu-cycles,umask=2").unwrap(), (0x23c, 0, 0));
        assert_eq!(e("config=0x1234,event=0x56").unwrap(), (0x1256, 0, 0));
        assert_eq!(
            encode_terms(&p, "event=1,name=mine").unwrap().3.as_deref(),
            Some("mine")
        );
        let err = |t: &str| e(t).unwrap_err().to_string();
        assert!(err("event=0x100").contains("too big for format field 'event'"));
        assert!(err("umask=zz").contains("'zz' is not a number"));
        assert!(err("bogus=1").contains("unknown term 'bogus'"));
        assert!(err("event=1,,umask=2").contains("empty term"));
    }

    #[test]
    fn perf_orders_pmu_names() {
        use std::cmp::Ordering::*;
        assert_eq!(name_order("cpu_atom", "cpu_core"), Less);
        assert_eq!(name_order("armv8_cortex_a55", "armv8_cortex_a76"), Less);
        // Suffixes compare as numbers: 0xa78 < 0xa510.
        assert_eq!(name_order("armv8_cortex_a510", "armv8_cortex_a78"), Greater);
        assert_eq!(name_order("armv8_pmuv3_10", "armv8_pmuv3_9"), Greater);
        assert_eq!(name_order("uncore_imc_2", "uncore_imc_10"), Less);
        // Two hex digits are no suffix (s390's cpum_cf): plain spelling.
        assert_eq!(name_order("cpum_cf", "cpum_ab"), Greater);
        assert_eq!(
            name_order("apple_firestorm_pmu", "apple_icestorm_pmu"),
            Less
        );
        assert_eq!(name_order("cpu", "cpu"), Equal);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_num("0x1f"), Some(31));
        assert_eq!(parse_num("31"), Some(31));
        assert_eq!(parse_num("0x"), None);
        assert_eq!(parse_num("-1"), None);
        assert_eq!(parse_num("99999999999999999999999"), None);
    }
}
