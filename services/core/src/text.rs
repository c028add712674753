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

/// Query parameters whose values are secrets (`?key=…`, `access_token=…`).
fn secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "sig",
        "signature",
        "auth",
    ]
    .iter()
    .any(|s| name.contains(s))
}

/// `text` with the credentials of every URL in it replaced by `***`: the
/// user and password before `@`, and the values of query parameters that
/// name a key, token, secret, password or signature. For error messages and
/// Debug output that quote a URL (`https://user:pass@host/?key=…`).
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The URL ends at whitespace, a quote or a closing bracket.
        let start = at + 3;
        let end = rest[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ']' | '`'))
            .map_or(rest.len(), |e| start + e);
        out.push_str(&rest[..start]);
        out.push_str(&redact_one(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One URL after its `scheme://`.
fn redact_one(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, tail) = url.split_at(authority_end);
    let mut out = match authority.rfind('@') {
        Some(at) => format!("***@{}", &authority[at + 1..]),
        None => authority.to_string(),
    };
    let (path, query) = match tail.find('?') {
        Some(q) => (&tail[..q], Some(&tail[q + 1..])),
        None => (tail, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        let (query, fragment) = match query.find('#') {
            Some(f) => (&query[..f], &query[f..]),
            None => (query, ""),
        };
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if secret_param(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
        out.push_str(fragment);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: no user, password or secret query value of a URL survives
    /// in the text; the rest of it does.
    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_urls(
                "error sending request for url (https://alice:s3cret@hooks.example.com/a?x=1&token=abc#f): timed out"
            ),
            "error sending request for url (https://***@hooks.example.com/a?x=1&token=***#f): timed out"
        );
        assert_eq!(
            redact_urls("http://user@h:8080 and https://h/p?key=AIza123&alt=media"),
            "http://***@h:8080 and https://h/p?key=***&alt=media"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
        assert_eq!(
            redact_urls("https://plain.example/x"),
            "https://plain.example/x"
        );
    }

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
