//! Caller-supplied text shown to people: in log lines and in tallyctl's
//! tables. Such text (a worker name, a pause message, a model version, an
//! error from the provider) may hold newlines that forge a log line,
//! terminal escapes that rewrite the screen, or bidirectional overrides
//! that show one thing and mean another. [`escape`] makes every such
//! character visible as `\u{…}` (newlines, tabs and carriage returns as
//! `\n`, `\t`, `\r`), and bounds the length.

use std::fmt::Write as _;

/// Whether `c` changes how text around it is shown: control characters
/// and the Unicode bidirectional formatting characters.
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Whether `text` holds nothing [`escape`] would change (the common case,
/// tested without allocating).
pub fn is_plain(text: &str) -> bool {
    !text.chars().any(is_hidden)
}

/// `text` with every control and bidirectional formatting character
/// written out (`\n`, `\u{1b}`), cut after `max` characters with `…(+N
/// bytes)` saying how much more there was.
pub fn escape(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max + 16));
    for (count, (at, c)) in text.char_indices().enumerate() {
        if count == max {
            let _ = write!(out, "…(+{} bytes)", text.len() - at);
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: no control or bidirectional character survives; plain
    /// text is unchanged; the length is bounded.
    #[test]
    fn hidden_characters_are_written_out() {
        assert_eq!(escape("gemini-2.5-flash", 100), "gemini-2.5-flash");
        assert_eq!(
            escape("v1\nINFO forged line\x1b[2J", 100),
            "v1\\nINFO forged line\\u{1b}[2J"
        );
        assert_eq!(escape("abc\u{202e}cba", 100), "abc\\u{202e}cba");
        assert!(is_plain("ok é"));
        assert!(!is_plain("a\rb"));
        let long = "x".repeat(300);
        let cut = escape(&long, 256);
        assert_eq!(cut, format!("{}…(+44 bytes)", "x".repeat(256)));
        for c in ['\0', '\x07', '\x7f', '\u{85}', '\u{2066}'] {
            let e = escape(&format!("a{c}b"), 10);
            assert!(!e.contains(c), "{e:?}");
        }
    }
}
