//! The prompt registry: immutable `(prompt, version)` templates.

use crate::types::{PromptRecord, Time};
use crate::{Result, Store, StoreError};

#[derive(sqlx::FromRow)]
struct PromptRow {
    prompt_id: String,
    version: String,
    template: String,
    response_schema: String,
    system_instruction: String,
    sha256: String,
    create_time: Time,
    media: Vec<String>,
}

impl From<PromptRow> for PromptRecord {
    fn from(r: PromptRow) -> Self {
        PromptRecord {
            prompt_id: r.prompt_id,
            version: r.version,
            template: r.template,
            response_schema: r.response_schema,
            system_instruction: r.system_instruction,
            sha256: r.sha256,
            create_time: r.create_time,
            media: r.media,
        }
    }
}

const COLUMNS: &str = "prompt_id, version, template, response_schema, system_instruction, sha256, \
     create_time, media";

impl Store {
    /// Registers a prompt version. The same content again answers the stored
    /// prompt; other content under the same name and version is
    /// ALREADY_EXISTS (versions are immutable).
    pub async fn register_prompt(&self, p: &PromptRecord) -> Result<PromptRecord> {
        let sql = format!(
            "INSERT INTO prompts (prompt_id, version, template, response_schema,
                                  system_instruction, sha256, media)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (prompt_id, version) DO NOTHING RETURNING {COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, PromptRow>(sqlx::AssertSqlSafe(sql))
            .bind(&p.prompt_id)
            .bind(&p.version)
            .bind(&p.template)
            .bind(&p.response_schema)
            .bind(&p.system_instruction)
            .bind(&p.sha256)
            .bind(&p.media)
            .fetch_optional(&self.pool)
            .await?;
        if let Some(row) = inserted {
            return Ok(row.into());
        }
        let existing = self.get_prompt(&p.prompt_id, &p.version).await?;
        if existing.sha256 == p.sha256 {
            Ok(existing)
        } else {
            Err(StoreError::AlreadyExists {
                kind: "prompt",
                name: format!(
                    "prompts/{}/versions/{} (with other content; register a new version)",
                    p.prompt_id, p.version
                ),
            })
        }
    }

    pub async fn get_prompt(&self, prompt_id: &str, version: &str) -> Result<PromptRecord> {
        let sql = format!("SELECT {COLUMNS} FROM prompts WHERE prompt_id = $1 AND version = $2");
        sqlx::query_as::<_, PromptRow>(sqlx::AssertSqlSafe(sql))
            .bind(prompt_id)
            .bind(version)
            .fetch_optional(&self.pool)
            .await?
            .map(Into::into)
            .ok_or_else(|| {
                StoreError::not_found("prompt", format!("prompts/{prompt_id}/versions/{version}"))
            })
    }
}
