//! A small aligned-text table: a header, rows of cells, columns padded to
//! their widest cell (counted in characters), numeric columns right-aligned.
//! Enough for a terminal; scripts use `--json`.

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles, all left-aligned.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        let align = vec![Align::Left; header.len()];
        Table {
            header,
            align,
            rows: Vec::new(),
        }
    }

    /// Right-aligns the given columns (numbers).
    pub fn right(mut self, columns: &[usize]) -> Self {
        for &c in columns {
            if let Some(a) = self.align.get_mut(c) {
                *a = Align::Right;
            }
        }
        self
    }

    /// Adds a row; missing cells are empty, extra cells are kept (and get
    /// no header).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The table as text, one line per row, each ending in `\n`. Trailing
    /// spaces are trimmed; newlines and tabs inside cells are shown as
    /// spaces so a cell never breaks the layout, and other control and
    /// bidirectional characters (terminal escapes) written out ([`cell`]).
    pub fn render(&self) -> String {
        self.render_with(true)
    }

    /// [`Table::render`] without the header line (`--no-headers`); columns
    /// are as wide as their widest cell.
    pub fn render_rows(&self) -> String {
        self.render_with(false)
    }

    fn render_with(&self, with_header: bool) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let header: Vec<String> = self.header.iter().map(|s| cell(s)).collect();
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|s| cell(s)).collect())
            .collect();
        let header = if with_header { Some(header) } else { None };
        let mut widths = vec![0usize; columns];
        for line in header.iter().chain(&rows) {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in header.iter().chain(&rows) {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = line.get(i).map(String::as_str).unwrap_or("");
                let pad = width - cell.chars().count();
                if i > 0 {
                    text.push_str("  ");
                }
                match self.align.get(i).copied().unwrap_or(Align::Left) {
                    Align::Left => {
                        text.push_str(cell);
                        text.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        text.extend(std::iter::repeat_n(' ', pad));
                        text.push_str(cell);
                    }
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Longest cell, in characters (a result or an error in `--full` views).
const MAX_CELL: usize = 64 * 1024;

/// Text from the server as one cell or value: newlines and tabs as spaces,
/// other control and bidirectional characters written out (`\u{1b}`), so a
/// caller-supplied name or message cannot break the layout or drive the
/// terminal.
pub fn cell(text: &str) -> String {
    let one_line = text.replace(['\n', '\r', '\t'], " ");
    if tally_core::text::is_plain(&one_line) && one_line.chars().count() <= MAX_CELL {
        return one_line;
    }
    tally_core::text::escape(&one_line, MAX_CELL)
}

/// Shortens `text` to at most `max` characters, marking the cut with `…`.
pub fn truncate(text: &str, max: usize) -> String {
    let one_line = cell(text);
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut out: String = one_line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `key  value` lines for one resource, keys padded to the longest.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        out.push_str(&format!("{k:<width$}  {}", cell(v)));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: caller-supplied text cannot drive the terminal or break a
    /// row: escapes and bidirectional overrides are written out.
    #[test]
    fn cells_write_out_terminal_escapes() {
        let mut t = Table::new(["worker", "message"]);
        t.row(["w\x1b[2J1", "paused\u{202e}txet\nINFO"]);
        let text = t.render();
        assert!(
            !text.contains('\x1b') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("w\\u{1b}[2J1"), "{text}");
        assert_eq!(text.lines().count(), 2);
        let f = fields(&[("actor", "a\x07b".to_string())]);
        assert_eq!(f, "actor  a\\u{7}b\n");
        assert!(!truncate("x\x1by", 10).contains('\x1b'));
    }

    #[test]
    fn columns_align_and_numbers_go_right() {
        let mut t = Table::new(["status", "rows"]).right(&[1]);
        t.row(["SUCCEEDED", "12"]);
        t.row(["PERMANENT", "3"]);
        t.row(["BLOCKED", "1000"]);
        assert_eq!(
            t.render(),
            "status     rows\nSUCCEEDED    12\nPERMANENT     3\nBLOCKED    1000\n"
        );
    }

    #[test]
    fn wide_characters_newlines_and_ragged_rows() {
        let mut t = Table::new(["a", "b"]);
        t.row(["é", "x\ny"]);
        t.row(["long cell"]);
        t.row(["1", "2", "extra"]);
        assert_eq!(
            t.render(),
            "a          b\né          x y\nlong cell\n1          2    extra\n"
        );
    }

    #[test]
    fn no_headers_drops_the_title_line_only() {
        let mut t = Table::new(["status", "rows"]).right(&[1]);
        t.row(["SUCCEEDED", "12"]);
        t.row(["BLOCKED", "1000"]);
        assert_eq!(t.render_rows(), "SUCCEEDED    12\nBLOCKED    1000\n");
        assert_eq!(Table::new(["key"]).render_rows(), "");
    }

    #[test]
    fn empty_table_is_just_the_header() {
        let t = Table::new(["key", "status"]);
        assert!(t.is_empty());
        assert_eq!(t.render(), "key  status\n");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly10!", 10), "exactly10!");
        assert_eq!(truncate("a longer message", 8), "a longe…");
        assert_eq!(truncate("two\nlines", 20), "two lines");
    }

    #[test]
    fn fields_pad_keys() {
        assert_eq!(
            fields(&[("name", "x".into()), ("model", "y".into())]),
            "name   x\nmodel  y\n"
        );
    }
}
