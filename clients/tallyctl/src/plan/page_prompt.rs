//! The prompt a page plan is enrolled with when none is named: the page
//! image as its media variable, the page's identity in the text, and the
//! page before's answer (`deps.previous`) when it has one. Registered under
//! the ledger's own id (inside the team's scope wherever the ledger is), at
//! a fixed version, so the planner and the Prefect flow
//! (`tallyctl prompts page`) enroll the same rows.

use tally_proto::v1 as pb;

/// The version the page prompt is registered at: a new version whenever
/// [`TEMPLATE`] changes (a version's text never does).
pub const VERSION: &str = "pages-v1";
/// The media variable the page image goes in (not a field of the plan's
/// rows, [`super::PAYLOAD_FIELDS`]).
pub const MEDIA: &str = "image";
/// The template: the image follows its text.
pub const TEMPLATE: &str = "Transcribe the attached page image: page {{ page }} of \
{{ school }} ({{ state }}, {{ year }}). Answer with the page's text only.\
{% if deps is defined %}\n\nThe page before it reads:\n{{ deps.previous }}{% endif %}";

/// The registration of `ledger`'s page prompt.
pub fn request(ledger: &str) -> pb::RegisterPromptRequest {
    pb::RegisterPromptRequest {
        prompt_id: ledger.to_string(),
        version: VERSION.to_string(),
        template: TEMPLATE.to_string(),
        media: vec![MEDIA.to_string()],
        ..Default::default()
    }
}

/// Where `ledger`'s page prompt is.
pub fn reference(ledger: &str) -> pb::PromptRef {
    pb::PromptRef {
        name: ledger.to_string(),
        version: VERSION.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: the page image never takes the place of a field the
    // plan's rows carry (`{{ page }}` keeps the page number).
    #[test]
    fn the_image_variable_is_not_a_row_field() {
        assert!(!super::super::PAYLOAD_FIELDS.contains(&MEDIA));
        let r = request("books");
        assert_eq!(
            (r.prompt_id.as_str(), r.media.as_slice()),
            ("books", &[MEDIA.to_string()][..])
        );
        assert!(TEMPLATE.contains("{{ page }}") && TEMPLATE.contains("deps.previous"));
    }
}
