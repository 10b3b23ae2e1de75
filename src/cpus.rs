//! CPU lists as perf and sysfs write them: `0-3,5,7-8`.

use anyhow::{bail, Context, Result};

/// Parses a CPU list into sorted, deduplicated CPU numbers.
pub(crate) fn parse_list(s: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            bail!("invalid CPU list '{s}': empty entry");
        }
        let num = |t: &str| -> Result<u32> {
            t.trim()
                .parse::<u32>()
                .with_context(|| format!("invalid CPU list '{s}': '{t}' is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    bail!("invalid CPU list '{s}': range {a}-{b} runs backwards");
                }
                if b - a > 65536 {
                    bail!("invalid CPU list '{s}': range {a}-{b} is too large");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Writes CPUs (sorted) as perf writes a CPU list: runs as `first-last`, joined by
/// commas (`0-15`, `1`, `0,2-3`).
pub(crate) fn format_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(match i == j {
            true => cpus[i].to_string(),
            false => format!("{}-{}", cpus[i], cpus[j]),
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("0").unwrap(), vec![0]);
        assert_eq!(parse_list("0-3,5").unwrap(), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_list("5,1-2,2").unwrap(), vec![1, 2, 5]);
        assert!(parse_list("").is_err());
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("a").is_err());
        assert!(parse_list("1,,2").is_err());
        assert!(parse_list("0-99999999").is_err());
    }

    #[test]
    fn lists_written_back() {
        assert_eq!(format_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(format_list(&[1]), "1");
        assert_eq!(format_list(&[0, 2, 3, 7]), "0,2-3,7");
        assert_eq!(format_list(&[]), "");
    }
}
