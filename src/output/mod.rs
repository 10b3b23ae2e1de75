//! Counts -> perf-stat-style output: the table, interval lines, CSV (-x) and JSON (-j),
//! with perf's metric comments. Pure: writes to any `io::Write`.
//!
//! Each line is first turned into `Fields` (strings and numbers in perf's units:
//! line.rs), then printed by the printer of the chosen format: table.rs, csv.rs,
//! json.rs, and metric_only.rs for --metric-only. report.rs holds the Report, which
//! says what is printed when: headers, intervals, the summary and its footer.

mod csv;
#[cfg(test)]
mod fixtures;
mod json;
mod line;
pub mod metric;
mod metric_only;
pub mod people;
mod report;
pub mod runq;
mod table;

pub use line::{Line, Place, Value};
pub use report::{Footer, Format, Options, Report};
