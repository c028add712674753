//! RegisterPrompt and GetPrompt.

use crate::harness::*;
use tally_proto::v1 as pb;

fn prompt(id: &str, version: &str, template: &str) -> pb::RegisterPromptRequest {
    pb::RegisterPromptRequest {
        prompt_id: id.into(),
        version: version.into(),
        template: template.into(),
        ..Default::default()
    }
}

/// RegisterPrompt refuses malformed ids and versions, empty templates and
/// response schemas that are not a JSON object, naming every bad field; the
/// same name and version with other text (template, schema or system
/// instruction) is ALREADY_EXISTS and leaves the stored prompt as it was.
#[tokio::test]
async fn register_prompt() {
    let env = env().await;
    let register = |req: pb::RegisterPromptRequest| {
        let mut client = env.client();
        async move { client.register_prompt(req).await }
    };

    for id in ["", "Page_OCR", "page ocr", "page/ocr", &"p".repeat(64)] {
        let s = env
            .rejected(register(prompt(id, "v1", "Read {{page}}")))
            .await;
        assert_invalid(&s, &["prompt_id"]);
    }
    for version in ["", "v 1", "v/1", "v1+", &"v".repeat(64)] {
        let s = env
            .rejected(register(prompt("ocr", version, "Read {{page}}")))
            .await;
        assert_invalid(&s, &["version"]);
    }
    for template in ["", "  \n\t"] {
        let s = env.rejected(register(prompt("ocr", "v1", template))).await;
        assert_invalid(&s, &["template"]);
    }
    for schema in ["[1]", "{", "\"string\""] {
        let s = env
            .rejected(register(pb::RegisterPromptRequest {
                response_schema: schema.into(),
                ..prompt("ocr", "v1", "Read {{page}}")
            }))
            .await;
        assert_invalid(&s, &["response_schema"]);
    }
    let s = env.rejected(register(prompt("Bad", "", ""))).await;
    assert_invalid(&s, &["prompt_id", "version", "template"]);

    let first = register(prompt("ocr", "v1", "Read {{page}}"))
        .await
        .expect("register")
        .into_inner();
    assert_eq!(first.name, "prompts/ocr/versions/v1");
    for other in [
        prompt("ocr", "v1", "Read {{page}} carefully"),
        pb::RegisterPromptRequest {
            response_schema: r#"{"type": "object"}"#.into(),
            ..prompt("ocr", "v1", "Read {{page}}")
        },
        pb::RegisterPromptRequest {
            system_instruction: "Be terse.".into(),
            ..prompt("ocr", "v1", "Read {{page}}")
        },
    ] {
        let s = env.rejected(register(other)).await;
        assert_eq!(s.code(), tonic::Code::AlreadyExists, "{}", s.message());
        let details = tonic_types::StatusExt::get_error_details(&s);
        let info = details.resource_info().expect("a ResourceInfo");
        assert_eq!(info.resource_type, "prompt");
        // The store appends a hint to the name ("(with other content;
        // register a new version)"), so only the prefix is the name.
        assert!(
            info.resource_name.starts_with("prompts/ocr/versions/v1"),
            "{}",
            info.resource_name
        );
    }
    // The same text again is a no-op that answers the stored prompt.
    let again = register(prompt("ocr", "v1", "Read {{page}}"))
        .await
        .expect("re-register the same text")
        .into_inner();
    assert_eq!(again, first);
    env.stop().await;
}

/// GetPrompt refuses malformed names and answers NOT_FOUND with a
/// ResourceInfo for an unregistered prompt or version.
#[tokio::test]
async fn get_prompt() {
    let env = env().await;
    env.client()
        .register_prompt(prompt("ocr", "v1", "Read {{page}}"))
        .await
        .unwrap();
    let get = |name: &str| {
        let mut client = env.client();
        let req = pb::GetPromptRequest {
            name: name.to_string(),
        };
        async move { client.get_prompt(req).await }
    };
    for name in [
        "",
        "prompts/ocr",
        "prompts/ocr/versions/",
        "prompts/OCR/versions/v1",
        "prompts/ocr/versions/v 1",
        "prompts/ocr/versions/v1/extra",
        "ledgers/ocr/versions/v1",
    ] {
        let s = env.rejected(get(name)).await;
        assert_invalid(&s, &["name"]);
    }
    for name in ["prompts/ocr/versions/v2", "prompts/other/versions/v1"] {
        let s = env.rejected(get(name)).await;
        assert_not_found(&s, "prompt", name);
    }
    assert_eq!(
        get("prompts/ocr/versions/v1")
            .await
            .unwrap()
            .into_inner()
            .template,
        "Read {{page}}"
    );
    env.stop().await;
}
