//! A create refused because its input file is not visible yet. Users report
//! OpenAI answering `POST /batches` with a 400 naming the file ("Cannot find
//! file file-abc") a moment after the upload succeeded. That is no refusal
//! of the request: the worker asks the file's status (`GET /files/{id}`)
//! and, while the file is there, creates again after a bounded backoff
//! ([`pauses`], about a minute in all); only then does the 400 stand as a
//! refusal. A file that is gone makes the job's create fail without a
//! refusal of the ledger ([`gone`]: the rows go back with no attempt). Pure.

use std::time::Duration;

use serde_json::Value;

use crate::provider::ProviderError;

/// The longest the worker waits, in all, for an input file to become
/// visible to creates.
pub const WAIT: Duration = Duration::from_secs(60);

/// The first pause; each next one doubles.
const FIRST: Duration = Duration::from_millis(500);

/// The `status` of the error [`gone`] answers: the create named a file the
/// provider no longer has (tally's word, not OpenAI's).
pub const FILE_GONE: &str = "tally_input_file_gone";

/// Whether `e` says the create's input file `file` cannot be found: a 400
/// (or 404) whose message names the file and says it is missing.
pub fn names_missing_file(e: &ProviderError, file: &str) -> bool {
    let ProviderError::Http { code, message, .. } = e else {
        return false;
    };
    let m = message.to_ascii_lowercase();
    matches!(code, 400 | 404)
        && !file.is_empty()
        && message.contains(file)
        && [
            "cannot find",
            "could not find",
            "not found",
            "no such file",
            "does not exist",
        ]
        .iter()
        .any(|w| m.contains(w))
}

/// What `GET /files/{id}` says of an input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Stored (`uploaded` or `processed`), or not known to be otherwise:
    /// a create may see it soon.
    There,
    /// Processing failed (`error`): the create's refusal stands.
    Failed,
    /// Deleted, or 404.
    Gone,
}

/// The state a `GET /files/{id}` answer (or its error) says.
pub fn file_state(got: &Result<Value, ProviderError>) -> FileState {
    match got {
        Ok(file) => match file["status"].as_str() {
            Some("error") => FileState::Failed,
            Some("deleted") => FileState::Gone,
            _ if file["deleted"].as_bool() == Some(true) => FileState::Gone,
            _ => FileState::There,
        },
        Err(e) if e.code() == Some(404) => FileState::Gone,
        // Not answered: the wait is bounded anyway.
        Err(_) => FileState::There,
    }
}

/// The pauses between creates, doubling from half a second, [`WAIT`] in
/// all at most.
pub fn pauses(total: Duration) -> Vec<Duration> {
    let mut out = Vec::new();
    let (mut next, mut left) = (FIRST, total);
    while !left.is_zero() {
        let pause = next.min(left);
        out.push(pause);
        left -= pause;
        next = next.saturating_mul(2);
    }
    out
}

/// The create's error `e` for input file `file`, once the file is known to
/// be gone: classified as no refusal of the ledger
/// (`refusal::classify`: the job's rows go back with no attempt).
pub fn gone(e: ProviderError, file: &str) -> ProviderError {
    retry_later(e, &format!("the input file {file} is gone"))
}

/// `e` as a create to try again later with a new job (the rows back with
/// no attempt, no pause), `why` added to its words.
pub fn retry_later(e: ProviderError, why: &str) -> ProviderError {
    match e {
        ProviderError::Http {
            code,
            message,
            retry_after,
            error_codes,
            ..
        } => ProviderError::Http {
            code,
            message: format!("{message} ({why})"),
            retry_after,
            status: FILE_GONE.to_owned(),
            error_codes,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn http(code: u16, message: &str) -> ProviderError {
        ProviderError::Http {
            code,
            message: message.into(),
            retry_after: None,
            status: String::new(),
            error_codes: Vec::new(),
        }
    }

    // Invariant: only an answer that names the create's own file and says
    // it is missing is taken for a file not visible yet; any other 400
    // stays the refusal it was.
    #[test]
    fn a_missing_file_is_told_by_its_name_and_words() {
        let f = "file-abc";
        assert!(names_missing_file(
            &http(400, "Cannot find file file-abc."),
            f
        ));
        assert!(names_missing_file(
            &http(404, "No such File object: file-abc"),
            f
        ));
        assert!(names_missing_file(
            &http(400, "Input file file-abc not found"),
            f
        ));
        assert!(!names_missing_file(
            &http(400, "Cannot find file file-xyz."),
            f
        ));
        assert!(!names_missing_file(
            &http(400, "file-abc: invalid JSONL"),
            f
        ));
        assert!(!names_missing_file(
            &http(429, "Cannot find file file-abc"),
            f
        ));
        assert!(!names_missing_file(&http(400, "Cannot find file "), ""));
        assert!(!names_missing_file(
            &ProviderError::Transport("x".into()),
            f
        ));
    }

    // Invariant: a file stored or of unknown state is waited for; one
    // whose processing failed is not; one deleted or 404 is gone.
    #[test]
    fn the_files_status_says_whether_to_wait() {
        for status in ["uploaded", "processed"] {
            assert_eq!(file_state(&Ok(json!({"status": status}))), FileState::There);
        }
        assert_eq!(
            file_state(&Ok(json!({"status": "error"}))),
            FileState::Failed
        );
        assert_eq!(file_state(&Ok(json!({"deleted": true}))), FileState::Gone);
        assert_eq!(file_state(&Err(http(404, "No such File"))), FileState::Gone);
        assert_eq!(file_state(&Err(http(503, "busy"))), FileState::There);
    }

    // Invariant: the creates are spaced by doubling pauses whose sum is the
    // bound exactly: the wait ends.
    #[test]
    fn pauses_double_and_add_up_to_the_bound() {
        let p = pauses(WAIT);
        assert_eq!(p.iter().sum::<Duration>(), WAIT);
        assert_eq!(p[0], FIRST);
        assert_eq!(p[1], FIRST * 2);
        assert!(p.len() <= 8, "{p:?}");
        assert!(pauses(Duration::ZERO).is_empty());
    }

    // Invariant: a gone file's error keeps the provider's words and code
    // and is named so the classifier tells it from a refusal.
    #[test]
    fn a_gone_file_keeps_the_providers_words() {
        let e = gone(http(400, "Cannot find file file-abc."), "file-abc");
        assert!(
            matches!(&e, ProviderError::Http { code: 400, status, message, .. }
            if status == FILE_GONE && message.contains("Cannot find file") && message.contains("gone"))
        );
    }
}
