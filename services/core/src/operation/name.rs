//! Operation-name normalization, in one place.
//!
//! The same batch reaches us as `batches/abc` from the API, with a project
//! and location prefix from some SDKs, under a model, as a full URL, and as
//! our own `operations/batches/abc`. If those spellings became different
//! keys, one operation would split into several records and the reducer
//! could not see that an event moves it backward. Every path (webhook,
//! poller, RPC) normalizes through [`normalize_name`].

/// The longest batch id we accept.
pub const MAX_ID_LEN: usize = 128;

/// The longest excerpt of a rejected name quoted back in an error.
const QUOTE_LEN: usize = 80;

/// Why a string is not an operation name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("operation name is empty")]
    Empty,
    #[error("operation name `{0}` has no `batches/{{id}}` at its end")]
    MissingBatchesSegment(String),
    #[error("batch id is {0} characters long, more than the {MAX_ID_LEN} allowed")]
    IdTooLong(usize),
    #[error("batch id `{id}` contains {ch:?}; only A-Z, a-z, 0-9, `_` and `-` are allowed")]
    InvalidIdChar { id: String, ch: char },
}

/// Reduces any spelling of a batch name to `batches/{id}`:
/// `batches/abc`, `projects/p/locations/l/batches/abc`,
/// `models/x/batches/abc`, `operations/batches/abc`, or a URL such as
/// `https://generativelanguage.googleapis.com/v1beta/batches/abc?alt=json`,
/// with or without surrounding whitespace and trailing slashes.
///
/// Whatever precedes `batches/` is dropped: the id is what the provider
/// keys the batch by, and prefixes are exactly what varies between
/// spellings. The id must be the last segment, so a method suffix
/// (`batches/abc:cancel`) or a child path is rejected rather than guessed at.
pub fn normalize_name(raw: &str) -> Result<String, NameError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(NameError::Empty);
    }
    let path = url_path(trimmed).trim_end_matches(|c: char| c == '/' || c.is_whitespace());
    let mut segments = path.rsplitn(3, '/');
    let id = segments.next().unwrap_or_default();
    if segments.next() != Some("batches") {
        return Err(NameError::MissingBatchesSegment(quote(trimmed)));
    }
    check_id(id)?;
    Ok(format!("batches/{id}"))
}

/// The path of a URL (without host, query or fragment); other text as is.
fn url_path(text: &str) -> &str {
    let Some((_scheme, rest)) = text.split_once("://") else {
        return text;
    };
    let path = rest.find('/').map_or("", |slash| &rest[slash..]);
    path.split(['?', '#']).next().unwrap_or_default()
}

fn check_id(id: &str) -> Result<(), NameError> {
    let len = id.chars().count();
    if len > MAX_ID_LEN {
        return Err(NameError::IdTooLong(len));
    }
    if let Some(ch) = id.chars().find(|&c| !is_id_char(c)) {
        return Err(NameError::InvalidIdChar { id: quote(id), ch });
    }
    Ok(())
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Bounds what a hostile name can put into an error message and a log line.
fn quote(text: &str) -> String {
    if text.chars().count() <= QUOTE_LEN {
        return text.to_owned();
    }
    let head: String = text.chars().take(QUOTE_LEN).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_normalizes_to_the_same_name() {
        for raw in [
            "batches/abc",
            "projects/p/locations/l/batches/abc",
            "models/x/batches/abc",
            "models/gemini-2.5-flash/batches/abc",
            "operations/batches/abc",
            "https://generativelanguage.googleapis.com/v1beta/batches/abc",
            "https://generativelanguage.googleapis.com/v1beta/batches/abc/",
            "http://127.0.0.1:8089/v1beta/batches/abc?alt=json",
            "https://example.test/v1beta/projects/p/locations/l/batches/abc#frag",
            "/v1beta/batches/abc",
            "batches/abc/",
            "batches/abc///",
            "  batches/abc \n",
            "\toperations/batches/abc/ \t",
        ] {
            assert_eq!(normalize_name(raw).as_deref(), Ok("batches/abc"), "{raw:?}");
        }
    }

    #[test]
    fn id_case_and_allowed_punctuation_are_kept() {
        assert_eq!(
            normalize_name("batches/AbC_1-2").as_deref(),
            Ok("batches/AbC_1-2")
        );
        // A project that happens to be called `batches` does not confuse it.
        assert_eq!(
            normalize_name("projects/batches/locations/l/batches/x9").as_deref(),
            Ok("batches/x9")
        );
        // Nor does a batch whose id is `batches`.
        assert_eq!(
            normalize_name("batches/batches").as_deref(),
            Ok("batches/batches")
        );
    }

    #[test]
    fn empty_is_rejected() {
        assert_eq!(normalize_name(""), Err(NameError::Empty));
        assert_eq!(normalize_name(" \n\t "), Err(NameError::Empty));
    }

    #[test]
    fn a_name_without_batches_is_rejected() {
        for raw in [
            "abc",
            "batches",
            "batches/",
            "/",
            "operations/abc",
            "files/abc",
            "batch/abc",
            "Batches/abc",
            "batches//abc",
            "batches/abc/results",
            "https://generativelanguage.googleapis.com/",
            "https://generativelanguage.googleapis.com",
        ] {
            assert!(
                matches!(
                    normalize_name(raw),
                    Err(NameError::MissingBatchesSegment(_))
                ),
                "{raw:?}: {:?}",
                normalize_name(raw)
            );
        }
    }

    #[test]
    fn bad_id_characters_are_rejected() {
        for (raw, bad) in [
            ("batches/abc:cancel", ':'),
            ("batches/a b", ' '),
            ("batches/a.b", '.'),
            ("batches/a%2Fb", '%'),
            ("batches/é", 'é'),
        ] {
            match normalize_name(raw) {
                Err(NameError::InvalidIdChar { ch, .. }) => assert_eq!(ch, bad, "{raw:?}"),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn id_length_is_bounded() {
        let longest = "a".repeat(MAX_ID_LEN);
        assert_eq!(
            normalize_name(&format!("batches/{longest}")),
            Ok(format!("batches/{longest}"))
        );
        let too_long = "a".repeat(MAX_ID_LEN + 1);
        assert_eq!(
            normalize_name(&format!("batches/{too_long}")),
            Err(NameError::IdTooLong(MAX_ID_LEN + 1))
        );
    }

    #[test]
    fn errors_read_clearly_and_stay_short() {
        assert_eq!(NameError::Empty.to_string(), "operation name is empty");
        assert_eq!(
            normalize_name("files/abc").unwrap_err().to_string(),
            "operation name `files/abc` has no `batches/{id}` at its end"
        );
        assert_eq!(
            normalize_name("batches/abc:cancel")
                .unwrap_err()
                .to_string(),
            "batch id `abc:cancel` contains ':'; only A-Z, a-z, 0-9, `_` and `-` are allowed"
        );
        assert_eq!(
            NameError::IdTooLong(200).to_string(),
            "batch id is 200 characters long, more than the 128 allowed"
        );
        let huge = format!("x/{}", "y".repeat(10_000));
        assert!(normalize_name(&huge).unwrap_err().to_string().len() < 200);
    }

    #[test]
    fn normalizing_is_idempotent() {
        let once = normalize_name("projects/p/locations/l/batches/abc").unwrap();
        assert_eq!(normalize_name(&once), Ok(once.clone()));
        assert_eq!(normalize_name(&format!("operations/{once}")), Ok(once));
    }
}
