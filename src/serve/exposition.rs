//! The metrics `bperf serve` exports, and their two text formats: Prometheus's text
//! exposition format 0.0.4 (written by the `prometheus` crate), which node_exporter's
//! textfile collector and promtool read, and OpenMetrics 1.0 (written by
//! `prometheus-client`), for scrapers that ask for it.

use prometheus::proto;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// The content type of each format, as the HTTP response names it.
pub(crate) const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
pub(crate) const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpositionFormat {
    Text,
    OpenMetrics,
}

impl ExpositionFormat {
    /// The format a scraper asks for in its Accept header: OpenMetrics when it lists it,
    /// as Prometheus does; the classic text format otherwise.
    pub(crate) fn from_accept(accept: Option<&str>) -> ExpositionFormat {
        let asks = |a: &str| {
            a.split(',').any(|part| {
                let mut params = part.split(';').map(str::trim);
                let openmetrics = params.next() == Some("application/openmetrics-text");
                openmetrics && !params.any(|p| p.replace(' ', "") == "q=0")
            })
        };
        match accept.is_some_and(asks) {
            true => ExpositionFormat::OpenMetrics,
            false => ExpositionFormat::Text,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            ExpositionFormat::Text => TEXT_CONTENT_TYPE,
            ExpositionFormat::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyType {
    Counter,
    Gauge,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SampleValue {
    Int(u64),
    Float(f64),
}

/// One time series: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: SampleValue,
}

/// A metric and its series. `name` is without the `_total` that counters get.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: FamilyType,
    pub samples: Vec<Sample>,
}

/// `families` in `format`, or why the encoder refused them (one line). A family
/// without series is written as nothing, in both formats: the text encoder refuses one
/// ("MetricFamily has no metrics"), and a scraper learns nothing from its HELP alone.
pub(crate) fn encode(families: &[Family], format: ExpositionFormat) -> Result<String, String> {
    let nonempty: Vec<&Family> = families.iter().filter(|f| !f.samples.is_empty()).collect();
    match format {
        ExpositionFormat::Text => encode_text(&nonempty),
        ExpositionFormat::OpenMetrics => encode_openmetrics(&nonempty),
    }
}

fn encode_text(families: &[&Family]) -> Result<String, String> {
    let protos: Vec<proto::MetricFamily> = families.iter().map(|f| to_proto(f)).collect();
    let mut out = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&protos, &mut out)
        .map_err(|e| format!("cannot encode the metrics: {e}"))?;
    Ok(out)
}

fn to_proto(f: &Family) -> proto::MetricFamily {
    let mut mf = proto::MetricFamily::default();
    let name = match f.kind {
        FamilyType::Counter => format!("{}_total", f.name),
        FamilyType::Gauge => f.name.to_string(),
    };
    mf.set_name(name);
    mf.set_help(f.help.to_string());
    mf.set_field_type(match f.kind {
        FamilyType::Counter => proto::MetricType::COUNTER,
        FamilyType::Gauge => proto::MetricType::GAUGE,
    });
    let metrics = f
        .samples
        .iter()
        .map(|s| {
            let labels = s
                .labels
                .iter()
                .map(|(k, v)| {
                    let mut l = proto::LabelPair::default();
                    l.set_name(k.to_string());
                    l.set_value(v.clone());
                    l
                })
                .collect();
            let value = match s.value {
                SampleValue::Int(v) => v as f64,
                SampleValue::Float(v) => v,
            };
            let mut m = proto::Metric::from_label(labels);
            match f.kind {
                FamilyType::Counter => {
                    let mut c = proto::Counter::default();
                    c.set_value(value);
                    m.set_counter(c);
                }
                FamilyType::Gauge => {
                    let mut g = proto::Gauge::default();
                    g.set_value(value);
                    m.set_gauge(g);
                }
            }
            m
        })
        .collect();
    mf.set_metric(metrics);
    mf
}

/// The families as a prometheus-client collector, asked for them at encoding.
#[derive(Debug)]
struct Collected(Vec<Family>);

impl prometheus_client::collector::Collector for Collected {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let kind = match f.kind {
                FamilyType::Counter => MetricType::Counter,
                FamilyType::Gauge => MetricType::Gauge,
            };
            let mut metric = encoder.encode_descriptor(f.name, f.help, None, kind)?;
            if let [one] = f.samples.as_slice() {
                if one.labels.is_empty() {
                    encode_value(f.kind, one.value, metric)?;
                    continue;
                }
            }
            for s in &f.samples {
                encode_value(f.kind, s.value, metric.encode_family(&s.labels)?)?;
            }
        }
        Ok(())
    }
}

fn encode_value(
    kind: FamilyType,
    value: SampleValue,
    series: MetricEncoder,
) -> Result<(), std::fmt::Error> {
    match (kind, value) {
        (FamilyType::Counter, SampleValue::Int(v)) => ConstCounter::new(v).encode(series),
        (FamilyType::Counter, SampleValue::Float(v)) => ConstCounter::new(v).encode(series),
        (FamilyType::Gauge, SampleValue::Int(v)) => {
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(series)
        }
        (FamilyType::Gauge, SampleValue::Float(v)) => ConstGauge::new(v).encode(series),
    }
}

fn encode_openmetrics(families: &[&Family]) -> Result<String, String> {
    let mut registry = prometheus_client::registry::Registry::default();
    let owned = families.iter().map(|f| (*f).clone()).collect();
    registry.register_collector(Box::new(Collected(owned)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .map_err(|e| format!("cannot encode the metrics: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Family> {
        vec![
            Family {
                name: "bperf_count",
                help: "Events counted.",
                kind: FamilyType::Counter,
                samples: vec![Sample {
                    labels: vec![("event", "task-clock".into()), ("cgroup", "a\"b\\c".into())],
                    value: SampleValue::Int(12345678901),
                }],
            },
            Family {
                name: "bperf_cgroups",
                help: "Cgroups counted.",
                kind: FamilyType::Gauge,
                samples: vec![Sample {
                    labels: vec![],
                    value: SampleValue::Int(3),
                }],
            },
        ]
    }

    #[test]
    fn the_text_format_names_counters_with_total() {
        let t = encode(&sample(), ExpositionFormat::Text).unwrap();
        assert!(t.contains("# TYPE bperf_count_total counter\n"), "{t}");
        assert!(
            t.contains(
                "bperf_count_total{event=\"task-clock\",cgroup=\"a\\\"b\\\\c\"} 12345678901\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("# TYPE bperf_cgroups gauge\nbperf_cgroups 3\n"),
            "{t}"
        );
        assert!(!t.contains("# EOF"));
    }

    #[test]
    fn openmetrics_ends_with_eof() {
        let t = encode(&sample(), ExpositionFormat::OpenMetrics).unwrap();
        assert!(t.contains("# TYPE bperf_count counter\n"), "{t}");
        assert!(t.contains("bperf_count_total{event=\"task-clock\","), "{t}");
        assert!(t.contains("\nbperf_cgroups 3\n"), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
    }

    /// No container counted: the per-series families are empty and `bperf_cgroups 0`
    /// is still written, in both formats.
    #[test]
    fn an_empty_family_is_written_as_nothing() {
        let mut families = sample();
        families[0].samples.clear();
        families[1].samples[0].value = SampleValue::Int(0);
        for format in [ExpositionFormat::Text, ExpositionFormat::OpenMetrics] {
            let t = encode(&families, format).unwrap();
            assert!(!t.contains("bperf_count"), "{t}");
            assert!(t.contains("\nbperf_cgroups 0\n"), "{t}");
        }
        let none = encode(&[], ExpositionFormat::OpenMetrics).unwrap();
        assert_eq!(none, "# EOF\n");
        assert_eq!(encode(&[], ExpositionFormat::Text).unwrap(), "");
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            ExpositionFormat::from_accept(Some(prometheus)),
            ExpositionFormat::OpenMetrics
        );
        assert_eq!(
            ExpositionFormat::from_accept(Some("*/*")),
            ExpositionFormat::Text
        );
        assert_eq!(ExpositionFormat::from_accept(None), ExpositionFormat::Text);
        assert_eq!(
            ExpositionFormat::from_accept(Some("application/openmetrics-text; q=0, text/plain")),
            ExpositionFormat::Text
        );
    }
}
