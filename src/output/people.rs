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

/// The character that carries byte 0x00 of a name that is not UTF-8 (see
/// [`text_of_bytes`]): plane 16's last private-use characters, U+10FF80 to U+10FFFF,
/// carry bytes 0x80 to 0xFF, as Python's surrogateescape carries them in U+DC80 to
/// U+DCFF (which a Rust string cannot hold).
const RAW_BYTES: u32 = 0x10FF00;

/// A name the kernel gives as bytes (a cgroup's directory) as text: UTF-8 as it is, and
/// each byte that is not (or is part of one of the characters that carry them) as the
/// character that carries it, which the escapes below write as `\xNN`.
pub fn text_of_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    let carry = |out: &mut String, bytes: &[u8]| {
        for &x in bytes {
            out.extend(char::from_u32(RAW_BYTES + u32::from(x)));
        }
    };
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match raw_byte(c) {
                Some(_) => carry(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
                None => out.push(c),
            }
        }
        carry(&mut out, chunk.invalid());
    }
    out
}

/// The byte `c` carries, if it carries one (see [`text_of_bytes`]).
fn raw_byte(c: char) -> Option<u8> {
    (c as u32)
        .checked_sub(RAW_BYTES)
        .and_then(|b| u8::try_from(b).ok())
}

/// `s` with the bytes it carries written as `\xNN` and nothing else changed: for
/// formats with escapes of their own (JSON, Prometheus' labels), which a reader undoes.
pub fn bytes_as_text(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| raw_byte(c).is_some()) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match raw_byte(c) {
            Some(b) => out.push_str(&format!("\\x{b:02x}")),
            None => out.push(c),
        }
    }
    out.into()
}

/// Whether [`escape_controls`] changes `s`: a table line can then go without it.
pub(crate) fn needs_escape(s: &str) -> bool {
    s.chars()
        .any(|c| c == '\\' || c.is_control() || raw_byte(c).is_some())
}

/// Control characters written as escapes, so that what a user typed or a task named
/// itself cannot move the cursor or break the line: `\n`, `\t`, `\x1b`; and the
/// backslash as `\\`, so that a name that is the text `\x1b` does not read as one with
/// an ESC in it. A byte a name carries (see [`text_of_bytes`]) is written `\xNN` too.
pub fn escape_controls(s: &str) -> String {
    escape_also(s, |_| false)
}

/// As [`escape_controls`], and the characters `also` picks written as `\xNN` (`\u{N}`
/// beyond U+00FF): a separator that must not show inside a field.
pub(crate) fn escape_also(s: &str, also: impl Fn(char) -> bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if let Some(b) = raw_byte(c) {
            let _ = write!(out, "\\x{b:02x}");
            continue;
        }
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
    fn bytes_that_are_not_utf8_are_carried_and_written_as_escapes() {
        let t = text_of_bytes(b"a\xffb\xc3\xa9\x1b");
        assert_eq!(escape_controls(&t), "a\\xffb\u{e9}\\x1b");
        assert_eq!(bytes_as_text(&t), "a\\xffb\u{e9}\u{1b}");
        assert!(needs_escape(&t) && !needs_escape("web/db"));
        // A character that carries a byte, named as such, is taken as its bytes.
        let carrier = "\u{10ffff}".to_string();
        assert_eq!(
            escape_controls(&text_of_bytes(carrier.as_bytes())),
            "\\xf4\\x8f\\xbf\\xbf"
        );
        assert_eq!(text_of_bytes(b"web/db"), "web/db");
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
