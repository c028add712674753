//! Gemini's own flags: where its API is and where its key is kept.

use std::path::PathBuf;

use crate::arg::UrlArg;
use crate::provider::Endpoint;

/// Gemini's flags (flattened into the worker's).
#[derive(Debug, Clone, clap::Args)]
pub struct GeminiFlags {
    /// Gemini API base URL (point it at the emulator for tests and demos).
    #[arg(
        long,
        env = "GEMINI_BASE_URL",
        default_value = "https://generativelanguage.googleapis.com"
    )]
    pub gemini_base_url: UrlArg,

    /// File holding the Gemini API key, instead of `GEMINI_API_KEY`.
    #[arg(long, env = "GEMINI_API_KEY_FILE")]
    pub gemini_api_key_file: Option<PathBuf>,
}

impl GeminiFlags {
    pub fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            base_url: &self.gemini_base_url,
            key_file: self.gemini_api_key_file.as_deref(),
            key_file_flag: "--gemini-api-key-file",
            key_env: "GEMINI_API_KEY",
        }
    }
}
