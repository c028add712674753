//! Which provider runs a model, and the model's name there.
//!
//! A model belongs to exactly one provider. The name says which:
//!
//! - `{provider}/{model}` names it explicitly: `openai/gpt-4o-mini`,
//!   `anthropic/claude-sonnet-4-6`, `gemini/gemini-2.5-flash`, or an
//!   OpenAI-compatible server configured under its own name
//!   (`vllm/meta-llama/Llama-3.1-8B-Instruct`: provider `vllm`, model
//!   `meta-llama/Llama-3.1-8B-Instruct`). The provider part is lowercase
//!   letters, digits and `-`, at most [`MAX_PROVIDER`] characters.
//! - Gemini's own resource names (`models/…`, `tunedModels/…`) are Gemini's.
//! - A bare name is recognised by its family: `gpt-…`, `chatgpt-…`,
//!   `o1…`/`o3…`/`o4…`, `ft:…` and the other OpenAI families are OpenAI's,
//!   `claude-…` Anthropic's; anything else is Gemini's, tally's first
//!   provider (rows enrolled before providers were named ran there).
//!
//! Pure: the store records each row's provider at enroll, and a worker
//! claims only its provider's rows.

use std::fmt;

/// The API a provider speaks (by default Gemini's, the worker's default
/// provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Api {
    /// The Gemini Batch API (files, `batchGenerateContent`, operations).
    #[default]
    Gemini,
    /// The OpenAI Batch API (`/v1/files`, `/v1/batches`), spoken by OpenAI
    /// and by OpenAI-compatible servers.
    OpenAi,
    /// Anthropic's Message Batches API.
    Anthropic,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Gemini, Api::OpenAi, Api::Anthropic];

    /// The provider name of the API's own service (`gemini`, `openai`,
    /// `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Gemini => "gemini",
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    /// The API named `name` (case-insensitive), if one is.
    pub fn parse(name: &str) -> Option<Api> {
        Api::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest provider name.
pub const MAX_PROVIDER: usize = 32;

/// Most characters of a provider account name.
pub const MAX_ACCOUNT: usize = 128;

/// Why `account` is not a provider account name (an opaque name, never a
/// key: at most [`MAX_ACCOUNT`] printable ASCII characters); `None` when
/// it is one. The one check, wherever an account is named.
pub fn account_problem(account: &str) -> Option<String> {
    (account.len() > MAX_ACCOUNT || !account.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| format!("must be at most {MAX_ACCOUNT} printable ASCII characters without spaces"))
}

/// Where a model runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<'a> {
    /// The provider's name (`gemini`, `openai`, `anthropic`, or a named
    /// OpenAI-compatible server).
    pub provider: &'a str,
    /// The model's name at the provider.
    pub model: &'a str,
}

impl Route<'_> {
    /// The API the provider speaks when its name says so; `None` for a
    /// named server (its workers are told which API it speaks).
    pub fn api(&self) -> Option<Api> {
        Api::parse(self.provider)
    }
}

/// Families of bare OpenAI model names.
const OPENAI_FAMILIES: [&str; 12] = [
    "gpt-",
    "chatgpt-",
    "o1",
    "o3",
    "o4",
    "ft:",
    "text-embedding-",
    "omni-moderation-",
    "davinci-",
    "babbage-",
    "computer-use-",
    "codex-",
];

/// Gemini resource-name prefixes.
const GEMINI_RESOURCES: [&str; 2] = ["models/", "tunedModels/"];

/// The route of `model` (see the module docs). Never fails: a bare name no
/// family claims is Gemini's.
pub fn route(model: &str) -> Route<'_> {
    let model = model.trim();
    if GEMINI_RESOURCES.iter().any(|p| model.starts_with(p)) {
        return Route {
            provider: Api::Gemini.as_str(),
            model,
        };
    }
    if let Some((provider, rest)) = model.split_once('/')
        && is_provider_name(provider)
        && !rest.is_empty()
    {
        return Route {
            provider,
            model: rest,
        };
    }
    let lower = model.to_ascii_lowercase();
    let provider = if OPENAI_FAMILIES.iter().any(|f| lower.starts_with(f)) {
        Api::OpenAi
    } else if lower.starts_with("claude-") {
        Api::Anthropic
    } else {
        Api::Gemini
    };
    Route {
        provider: provider.as_str(),
        model,
    }
}

/// The provider of `model` (see [`route`]).
pub fn provider_of(model: &str) -> &str {
    route(model).provider
}

/// Whether `name` can name a provider: lowercase ASCII letters, digits and
/// `-`, starting with a letter, at most [`MAX_PROVIDER`] characters.
pub fn is_provider_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_PROVIDER
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Why a row's own request (a payload without a prompt) cannot run at
/// `api`'s provider: it is another provider's request (Gemini's
/// `contents`, OpenAI's `messages`). Rows are converted only where the
/// conversion is exact, at enroll (`tallyctl enroll --format openai`),
/// never guessed at here. `None` when nothing says so.
pub fn foreign_request(api: Api, payload: &serde_json::Value) -> Option<String> {
    let has = |k: &str| payload.get(k).is_some_and(serde_json::Value::is_array);
    match api {
        Api::Gemini if has("messages") && !has("contents") => Some(
            "is an OpenAI-style request (`messages`) for a Gemini model: enroll it with an OpenAI model, or convert it (`tallyctl enroll --format openai`)".into(),
        ),
        Api::OpenAi | Api::Anthropic if has("contents") && !has("messages") => Some(format!(
            "is a Gemini request (`contents`) for a model that runs at {api}: give the row a Gemini model, or send {api}'s own request shape"
        )),
        Api::Gemini | Api::OpenAi | Api::Anthropic => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(model: &str) -> (&str, &str) {
        let r = route(model);
        (r.provider, r.model)
    }

    // Invariant: every model has exactly one provider, and an explicit
    // provider wins over the family a bare name would be recognised by.
    #[test]
    fn every_model_has_one_provider() {
        assert_eq!(r("gemini-2.5-flash"), ("gemini", "gemini-2.5-flash"));
        assert_eq!(
            r("models/gemini-2.5-pro"),
            ("gemini", "models/gemini-2.5-pro")
        );
        assert_eq!(r("tunedModels/abc"), ("gemini", "tunedModels/abc"));
        assert_eq!(
            r("flash"),
            ("gemini", "flash"),
            "unknown bare names: Gemini"
        );
        assert_eq!(r("gpt-4o-mini"), ("openai", "gpt-4o-mini"));
        assert_eq!(r("o3-mini"), ("openai", "o3-mini"));
        assert_eq!(
            r("ft:gpt-4o-mini:acme::abc123"),
            ("openai", "ft:gpt-4o-mini:acme::abc123")
        );
        assert_eq!(r("claude-sonnet-4-6"), ("anthropic", "claude-sonnet-4-6"));
        assert_eq!(r("openai/gpt-4o"), ("openai", "gpt-4o"));
        assert_eq!(r("gemini/gpt-lookalike"), ("gemini", "gpt-lookalike"));
        assert_eq!(
            r("vllm/meta-llama/Llama-3.1-8B-Instruct"),
            ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
        );
    }

    #[test]
    fn only_plain_names_name_a_provider() {
        assert!(is_provider_name("vllm"));
        assert!(is_provider_name("together-ai2"));
        assert!(!is_provider_name("Meta-Llama"));
        assert!(!is_provider_name("2fast"));
        assert!(!is_provider_name(""));
        assert!(!is_provider_name(&"a".repeat(MAX_PROVIDER + 1)));
        // Not a provider name: the whole string is a bare (Gemini) name.
        assert_eq!(r("Meta-Llama/x"), ("gemini", "Meta-Llama/x"));
        assert_eq!(r("vllm/"), ("gemini", "vllm/"));
    }

    // Invariant: a request is never run at a provider whose shape it is
    // not; text rows and each provider's own shape pass.
    #[test]
    fn requests_run_only_where_they_belong() {
        use serde_json::json;
        let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "x"}]}]});
        let openai = json!({"messages": [{"role": "user", "content": "x"}]});
        let text = json!({"text": "x"});
        assert!(foreign_request(Api::Gemini, &gemini).is_none());
        assert!(foreign_request(Api::OpenAi, &openai).is_none());
        assert!(foreign_request(Api::Gemini, &text).is_none());
        assert!(foreign_request(Api::OpenAi, &text).is_none());
        assert!(
            foreign_request(Api::Gemini, &openai)
                .unwrap()
                .contains("OpenAI")
        );
        assert!(
            foreign_request(Api::OpenAi, &gemini)
                .unwrap()
                .contains("Gemini")
        );
    }

    #[test]
    fn apis_are_named_by_their_provider() {
        assert_eq!(route("gpt-4o").api(), Some(Api::OpenAi));
        assert_eq!(route("vllm/x").api(), None);
        assert_eq!(Api::parse(" OpenAI "), Some(Api::OpenAi));
        for a in Api::ALL {
            assert_eq!(Api::parse(a.as_str()), Some(a));
        }
    }
}
