//! `tallyctl prompts register|page|get`.

use crate::cli::PromptsCmd;
use crate::error::{CliError, ExitCode};
use crate::table::fields;
use crate::{Ctx, prompt_name, render};
use std::path::Path;
use tally_proto::v1 as pb;

fn read(path: &Path, flag: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path)
        .map_err(|e| CliError::input(format!("{flag} {}: {e}", path.display())))
}

/// Registers `ledger`'s page prompt (the same text again is a no-op).
pub async fn register_page_prompt(ctx: &mut Ctx, ledger: &str) -> Result<pb::Prompt, CliError> {
    let ledger = crate::ledger_id(ledger);
    let req = crate::plan::page_prompt::request(ledger);
    let what = format!(
        "register the page prompt {ledger}@{}",
        crate::plan::page_prompt::VERSION
    );
    Ok(ctx
        .clients
        .ledgers
        .register_prompt(req)
        .await
        .map_err(|s| CliError::server(what, s))?
        .into_inner())
}

pub async fn run(ctx: &mut Ctx, cmd: PromptsCmd) -> Result<ExitCode, CliError> {
    let prompt = match cmd {
        PromptsCmd::Register {
            id,
            version,
            template_file,
            schema_file,
            system_file,
            media,
            ..
        } => {
            let template = read(&template_file, "--template-file")?;
            let response_schema = match &schema_file {
                Some(p) => {
                    let text = read(p, "--schema-file")?;
                    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| {
                        CliError::input(format!("--schema-file {}: not JSON: {e}", p.display()))
                    })?;
                    text
                }
                None => String::new(),
            };
            let system_instruction = match &system_file {
                Some(p) => read(p, "--system-file")?,
                None => String::new(),
            };
            ctx.clients
                .ledgers
                .register_prompt(pb::RegisterPromptRequest {
                    prompt_id: id.clone(),
                    version: version.clone(),
                    template,
                    response_schema,
                    system_instruction,
                    media,
                })
                .await
                .map_err(|s| CliError::server(format!("register prompt {id}@{version}"), s))?
                .into_inner()
        }
        PromptsCmd::Page { ledger, .. } => register_page_prompt(ctx, &ledger).await?,
        PromptsCmd::Get { name, .. } => {
            let name = prompt_name(&name)?;
            ctx.clients
                .ledgers
                .get_prompt(pb::GetPromptRequest { name: name.clone() })
                .await
                .map_err(|s| CliError::server(format!("get {name}"), s))?
                .into_inner()
        }
    };
    if ctx.json {
        ctx.print_json(&render::prompt_json_full(&prompt));
        return Ok(ExitCode::Ok);
    }
    print!(
        "{}",
        fields(&[
            ("name", prompt.name.clone()),
            ("sha256", prompt.sha256.clone()),
            ("created", render::time(prompt.create_time.as_ref())),
        ])
    );
    if !prompt.media.is_empty() {
        println!("media: {}", prompt.media.join(", "));
    }
    println!("--- template\n{}", prompt.template.trim_end());
    if !prompt.system_instruction.is_empty() {
        println!(
            "--- system instruction\n{}",
            prompt.system_instruction.trim_end()
        );
    }
    if !prompt.response_schema.is_empty() {
        println!("--- response schema\n{}", prompt.response_schema.trim_end());
    }
    Ok(ExitCode::Ok)
}
