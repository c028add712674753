//! Anthropic's own flags: where its API is and where its key is kept.

use std::path::PathBuf;

use crate::arg::UrlArg;
use crate::provider::Endpoint;

/// Anthropic's flags (flattened into the worker's).
#[derive(Debug, Clone, clap::Args)]
pub struct AnthropicFlags {
    /// Anthropic API base URL, without the version (as the official SDK's
    /// `base_url`: the emulator's `http://host:port`).
    #[arg(
        long,
        env = "ANTHROPIC_BASE_URL",
        default_value = "https://api.anthropic.com"
    )]
    pub anthropic_base_url: UrlArg,

    /// File holding the Anthropic API key, instead of `ANTHROPIC_API_KEY`.
    #[arg(long, env = "ANTHROPIC_API_KEY_FILE")]
    pub anthropic_api_key_file: Option<PathBuf>,
}

impl AnthropicFlags {
    pub fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            base_url: &self.anthropic_base_url,
            key_file: self.anthropic_api_key_file.as_deref(),
            key_file_flag: "--anthropic-api-key-file",
            key_env: "ANTHROPIC_API_KEY",
        }
    }
}
