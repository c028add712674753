//! What an emulator is started with: the API key it accepts, the fault plan,
//! how long batches sit in each state, where webhooks go, and the seed that
//! makes output order reproducible.

use std::time::Duration;

use crate::faults::FaultPlan;

/// Everything [`crate::Emulator::start`] needs.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// The only API key accepted (`x-goog-api-key` header or `?key=`).
    pub api_key: String,
    /// Faults to inject; replaceable at run time with `Emulator::set_faults`.
    pub faults: FaultPlan,
    /// How long a batch sits in PENDING and in RUNNING.
    pub timing: Timing,
    /// Where batch state changes are announced, if anywhere.
    pub webhook: Option<WebhookTarget>,
    /// Seeds the output shuffle, so a run is reproducible.
    pub seed: u64,
    /// The models batches may be created for; any other answers the
    /// provider's 404 NOT_FOUND.
    pub models: Models,
    /// The project's file storage quota: an upload that would take the
    /// live uploaded files past it answers 429 (quota
    /// `FileStorageBytesPerProject`). Default 20 GiB, the documented limit.
    pub file_storage_bytes: u64,
    /// The synchronous endpoint's limits and latency.
    pub online: OnlineConfig,
}

pub use emulator_kit::online::{Latency, OnlineConfig};

/// The Files API's storage quota per project (20 GiB).
pub const FILE_STORAGE_BYTES: u64 = 20 * 1024 * 1024 * 1024;
/// The largest file the Files API takes (2 GB).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024 * 1024;

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            api_key: "emulator-key".to_owned(),
            faults: FaultPlan::default(),
            timing: Timing::default(),
            webhook: None,
            seed: 0,
            models: Models::default(),
            file_storage_bytes: FILE_STORAGE_BYTES,
            online: OnlineConfig::default(),
        }
    }
}

/// The models a project may create batches for. The provider answers a
/// create for any other (a typo, a retired model, one that does not support
/// batches) 404 NOT_FOUND `models/{m} is not found for API version {v}, or
/// is not supported for batchGenerateContent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Models {
    /// Every model name is accepted (for tests of other things).
    Any,
    /// Only these: generation models for `batchGenerateContent`, embedding
    /// models for `asyncBatchEmbedContent`.
    Only {
        generate: Vec<String>,
        embed: Vec<String>,
    },
}

/// Generation models of the Gemini API that take batches (the models page
/// lists Batch API support per model; aliases included).
pub const GENERATE_MODELS: &[&str] = &[
    "gemini-2.0-flash",
    "gemini-2.0-flash-001",
    "gemini-2.0-flash-lite",
    "gemini-2.0-flash-lite-001",
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-2.5-pro",
    "gemini-3-flash-preview",
    "gemini-3-pro-preview",
    "gemini-flash-latest",
    "gemini-flash-lite-latest",
    "gemini-pro-latest",
];

/// Embedding models that take `asyncBatchEmbedContent`.
pub const EMBED_MODELS: &[&str] = &["gemini-embedding-001"];

impl Default for Models {
    fn default() -> Self {
        let own = |names: &[&str]| names.iter().map(|m| (*m).to_owned()).collect();
        Models::Only {
            generate: own(GENERATE_MODELS),
            embed: own(EMBED_MODELS),
        }
    }
}

impl Models {
    /// `--models`: `*` for any, else a comma-separated list of generation
    /// models (the embedding models stay as they are).
    pub fn parse(spec: &str) -> Result<Models, String> {
        if spec.trim() == "*" {
            return Ok(Models::Any);
        }
        let generate: Vec<String> = spec
            .split(',')
            .map(|m| m.trim().trim_start_matches("models/").to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        if generate.is_empty() {
            return Err("--models needs `*` or at least one model name".into());
        }
        Ok(Models::Only {
            generate,
            embed: EMBED_MODELS.iter().map(|m| (*m).to_owned()).collect(),
        })
    }

    /// Whether a batch of `kind` may be made for `model`.
    pub fn allows(&self, model: &str, embed: bool) -> bool {
        match self {
            Models::Any => true,
            Models::Only { generate, embed: e } => {
                let list = if embed { e } else { generate };
                list.iter().any(|m| m == model)
            }
        }
    }
}

/// Dwell times of a batch. A batch is created PENDING, becomes RUNNING after
/// `pending`, and reaches its terminal state `running` later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub pending: Duration,
    pub running: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            pending: Duration::from_millis(200),
            running: Duration::from_millis(500),
        }
    }
}

impl Timing {
    /// Short dwell times for tests.
    pub fn fast() -> Self {
        Self {
            pending: Duration::from_millis(20),
            running: Duration::from_millis(30),
        }
    }
}

/// A receiver of Standard Webhooks deliveries, how to deliver to it, and
/// what the events carry (`payload`).
pub type WebhookTarget = emulator_kit::delivery::WebhookTarget<WebhookPayload>;

/// The `data` of batch events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WebhookPayload {
    /// As the webhooks guide documents them: `batch.succeeded` {id,
    /// output_file_uri}; `batch.failed` {id, error_code, error_message};
    /// `batch.cancelled` and `batch.expired` {id} only. Nothing says which
    /// rows a batch that did not succeed answered.
    #[default]
    Documented,
    /// Richer than documented: every terminal event names the batch's
    /// responses file when it has one, and its error.
    Rich,
}

impl WebhookPayload {
    pub fn parse(s: &str) -> Result<WebhookPayload, String> {
        match s {
            "documented" => Ok(WebhookPayload::Documented),
            "rich" => Ok(WebhookPayload::Rich),
            other => Err(format!(
                "unknown webhook payload {other:?}: `documented` or `rich`"
            )),
        }
    }
}
