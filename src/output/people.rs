//! Tables for people, drawn by comfy-table: bperf's own views (`bperf report --sort` and
//! `--hist`, `bperf list --details`), whose shape no perf output fixes. perf's formats
//! (stat's table, -x, -j, perf list) keep their exact widths and are written by hand.

use comfy_table::{CellAlignment, LineStyle, Table, TableStyle};

/// Columns apart by spaces and the header ruled off from the rows, nothing else: a
/// row still splits on whitespace into its cells.
const STYLE: TableStyle = TableStyle::new().header_separator(LineStyle::none().fill('─'));

/// A column: its heading, and whether it holds numbers (right-aligned).
pub struct Column {
    pub name: String,
    pub numeric: bool,
}

impl Column {
    pub fn text(name: &str) -> Column {
        Column {
            name: name.into(),
            numeric: false,
        }
    }

    pub fn number(name: &str) -> Column {
        Column {
            name: name.into(),
            numeric: true,
        }
    }
}

/// `rows` under `columns`, each line without trailing blanks, ending in a newline.
pub(crate) fn draw(columns: &[Column], rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_style(STYLE);
    t.set_header(columns.iter().map(|c| c.name.as_str()));
    t.add_rows(rows.iter().map(|r| r.iter().map(String::as_str)));
    for (i, c) in columns.iter().enumerate() {
        if let (true, Some(col)) = (c.numeric, t.column_mut(i)) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = t.trim_fmt();
    out.push('\n');
    out
}

/// Control characters written as escapes, so that what a user typed or a task named
/// itself cannot move the cursor or break the line: `\n`, `\t`, `\x1b`; and the
/// backslash as `\\`, so that a name that is the text `\x1b` does not read as one with
/// an ESC in it.
pub fn escape_controls(s: &str) -> String {
    escape_also(s, |_| false)
}

/// As [`escape_controls`], and the characters `also` picks written as `\xNN` (`\u{N}`
/// beyond U+00FF): a separator that must not show inside a field.
pub(crate) fn escape_also(s: &str, also: impl Fn(char) -> bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let _ = match c {
            '\\' => out.write_str("\\\\"),
            '\n' => out.write_str("\\n"),
            '\t' => out.write_str("\\t"),
            '\r' => out.write_str("\\r"),
            c if (c.is_control() || also(c)) && (c as u32) < 0x100 => {
                write!(out, "\\x{:02x}", c as u32)
            }
            c if also(c) => write!(out, "\\u{{{:x}}}", c as u32),
            c => out.write_char(c),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backslash_is_escaped_so_no_text_reads_as_an_escape() {
        assert_eq!(escape_controls("\u{1b}"), "\\x1b");
        assert_eq!(escape_controls("\\x1b"), "\\\\x1b");
        assert_ne!(escape_controls("\\x1b"), escape_controls("\u{1b}"));
        assert_eq!(escape_controls("a\0b\u{9b}"), "a\\x00b\\x9b");
    }

    #[test]
    fn chosen_characters_are_escaped_too() {
        let csv = |s| escape_also(s, |c| c == ',' || c == '"');
        assert_eq!(csv("a,b\"c\n"), "a\\x2cb\\x22c\\n");
        assert_eq!(escape_also("a→b", |c| c == '→'), "a\\u{2192}b");
    }

    #[test]
    fn numbers_align_right_under_a_ruled_header() {
        let columns = [Column::text("comm"), Column::number("slices")];
        let rows = [
            vec!["spin".to_string(), "12".to_string()],
            vec!["x".to_string(), "3".to_string()],
        ];
        assert_eq!(
            draw(&columns, &rows),
            " comm  slices\n──────────────\n spin      12\n x          3\n"
        );
    }
}
