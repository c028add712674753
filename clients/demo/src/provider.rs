//! The provider the demo runs against, emulated in-process: Gemini's Batch
//! API, OpenAI's or Anthropic's Message Batches, with the dataset's
//! faults; signed webhooks to tally delivered twice and once more out of
//! order (Anthropic sends none: the worker polls).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::dataset;
use crate::report::ProviderCounts;

/// Which provider (`--provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Gemini,
    Openai,
    Anthropic,
}

impl Which {
    /// The ledger's model: one the provider runs.
    pub fn model(self) -> &'static str {
        match self {
            Which::Gemini => "gemini-2.5-flash",
            Which::Openai => "gpt-4o-mini",
            Which::Anthropic => "claude-haiku-4-5",
        }
    }

    /// The ledger when `--ledger` is not given: one per provider, so a run
    /// on one never finds the other's rows already final.
    pub fn ledger(self) -> &'static str {
        match self {
            Which::Gemini => "demo",
            Which::Openai => "demo-openai",
            Which::Anthropic => "demo-anthropic",
        }
    }
}

/// A running emulator.
pub enum Emulated {
    Gemini(gemini_emulator::Emulator),
    OpenAi(openai_emulator::Emulator),
    Anthropic(anthropic_emulator::Emulator),
}

/// A second copy of each event after later ones: out-of-order delivery.
const REDELIVER_AFTER: Duration = Duration::from_millis(300);

impl Emulated {
    /// Starts `which`'s emulator, its webhooks signed with `secret` to
    /// tally's listener at `http`.
    pub async fn start(which: Which, http: SocketAddr, secret: &str) -> Result<Emulated> {
        let addr: SocketAddr = "127.0.0.1:0".parse()?;
        Ok(match which {
            Which::Gemini => {
                let mut webhook = gemini_emulator::WebhookTarget::new(
                    format!("http://{http}/webhooks/gemini"),
                    secret,
                );
                webhook.duplicate = true;
                webhook.redeliver_after = Some(REDELIVER_AFTER);
                let config = gemini_emulator::EmulatorConfig {
                    faults: dataset::faults(),
                    timing: gemini_emulator::Timing::default(),
                    webhook: Some(webhook),
                    ..gemini_emulator::EmulatorConfig::default()
                };
                Emulated::Gemini(
                    gemini_emulator::Emulator::start(addr, config)
                        .await
                        .context("starting the gemini emulator")?,
                )
            }
            Which::Openai => {
                let mut webhook = openai_emulator::WebhookTarget::new(
                    format!("http://{http}/webhooks/openai"),
                    secret,
                );
                webhook.duplicate = true;
                webhook.redeliver_after = Some(REDELIVER_AFTER);
                let config = openai_emulator::EmulatorConfig {
                    faults: dataset::openai_faults(),
                    webhook: Some(webhook),
                    ..openai_emulator::EmulatorConfig::default()
                };
                Emulated::OpenAi(
                    openai_emulator::Emulator::start(addr, config)
                        .await
                        .context("starting the OpenAI emulator")?,
                )
            }
            Which::Anthropic => {
                let config = anthropic_emulator::EmulatorConfig {
                    faults: dataset::anthropic_faults(),
                    ..anthropic_emulator::EmulatorConfig::default()
                };
                Emulated::Anthropic(
                    anthropic_emulator::Emulator::start(addr, config)
                        .await
                        .context("starting the Anthropic emulator")?,
                )
            }
        })
    }

    /// What the run prints about it.
    pub fn describe(&self) -> String {
        match self {
            Emulated::Gemini(e) => format!(
                "gemini-emulator on {} (faults: safety, prompt blocked, 429/503, empty, bad JSON, 400, missing rows, a failed batch; webhooks duplicated and reordered)",
                e.base_url()
            ),
            Emulated::OpenAi(e) => format!(
                "openai-emulator on {}/v1 (faults: content filter, refusal, 429/503, cut at max tokens, bad JSON, 400, missing rows, a batch expired part-way; webhooks duplicated and reordered)",
                e.base_url()
            ),
            Emulated::Anthropic(e) => format!(
                "anthropic-emulator on {} (faults: refusals, 429/529 and 500 results, cut at max tokens, bad JSON, 400, a batch expired part-way; no webhooks: polled)",
                e.base_url()
            ),
        }
    }

    /// The worker flags that point it at this provider.
    pub fn worker_flags(&self) -> Vec<String> {
        match self {
            Emulated::Gemini(e) => vec!["--gemini-base-url".into(), e.base_url()],
            Emulated::OpenAi(e) => vec![
                "--provider".into(),
                "openai".into(),
                "--openai-base-url".into(),
                format!("{}/v1", e.base_url()),
            ],
            Emulated::Anthropic(e) => vec![
                "--provider".into(),
                "anthropic".into(),
                "--anthropic-base-url".into(),
                e.base_url(),
            ],
        }
    }

    /// The key the emulator accepts.
    pub fn api_key(&self) -> String {
        match self {
            Emulated::Gemini(e) => e.api_key().to_owned(),
            Emulated::OpenAi(e) => e.api_key().to_owned(),
            Emulated::Anthropic(e) => e.api_key().to_owned(),
        }
    }

    /// What the provider was asked for and paid for.
    pub fn counts(&self) -> ProviderCounts {
        match self {
            Emulated::Gemini(e) => {
                let s = e.stats();
                ProviderCounts {
                    batches_created: s.batches_created,
                    rows_sent: s.submissions.values().map(Vec::len).sum(),
                    create_rejections: s.create_rejections,
                    webhooks_sent: s.webhooks_sent,
                }
            }
            Emulated::OpenAi(e) => {
                let s = e.stats();
                ProviderCounts {
                    batches_created: s.batches_created,
                    rows_sent: s.submissions.values().map(Vec::len).sum(),
                    create_rejections: s.create_rejections,
                    webhooks_sent: s.webhooks_sent,
                }
            }
            Emulated::Anthropic(e) => {
                let s = e.stats();
                ProviderCounts {
                    batches_created: s.batches_created,
                    rows_sent: s.submissions.values().map(Vec::len).sum(),
                    create_rejections: s.create_rejections,
                    webhooks_sent: 0,
                }
            }
        }
    }

    pub async fn shutdown(self) {
        match self {
            Emulated::Gemini(e) => e.shutdown().await,
            Emulated::OpenAi(e) => e.shutdown().await,
            Emulated::Anthropic(e) => e.shutdown().await,
        }
    }
}
