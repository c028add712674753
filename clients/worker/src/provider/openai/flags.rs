//! OpenAI's own flags: where its API (or an OpenAI-compatible server's)
//! is, where its key is kept, and which API its synchronous calls use.

use std::path::PathBuf;

use super::online::OnlineApi;
use crate::arg::UrlArg;
use crate::provider::Endpoint;

/// OpenAI's flags (flattened into the worker's).
#[derive(Debug, Clone, clap::Args)]
pub struct OpenAiFlags {
    /// OpenAI API base URL, version included (an OpenAI-compatible
    /// server's, or the emulator's `http://host:port/v1`).
    #[arg(
        long,
        env = "OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub openai_base_url: UrlArg,

    /// File holding the OpenAI (or OpenAI-compatible server's) API key,
    /// instead of `OPENAI_API_KEY`.
    #[arg(long, env = "OPENAI_API_KEY_FILE")]
    pub openai_api_key_file: Option<PathBuf>,

    /// Synchronous lanes: the API each call goes to, `chat`
    /// (`/chat/completions`) or `responses` (`/responses`, the row's
    /// request translated); batches always run chat completions.
    #[arg(long, env = "TALLY_WORKER_OPENAI_API", value_enum, default_value_t = OnlineApi::Chat)]
    pub openai_api: OnlineApi,
}

impl OpenAiFlags {
    pub fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            base_url: &self.openai_base_url,
            key_file: self.openai_api_key_file.as_deref(),
            key_file_flag: "--openai-api-key-file",
            key_env: "OPENAI_API_KEY",
        }
    }
}
