//! What an OpenAI answer said, whichever endpoint wrote it (chat
//! completions or the Responses API): its text, how it ended and its
//! refusal, and its usage. Pure.

use serde_json::Value;
use tally_proto::v1 as pb;

/// What an answer body says, whichever endpoint wrote it: its text, how
/// it ended (in chat completions' words: `stop`, `length`,
/// `content_filter`, …), and the model's refusal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Said {
    pub text: String,
    pub finish: String,
    pub refusal: Option<String>,
}

/// Where a usage object keeps its counts: the input and output tokens, and
/// the reasoning (in the output) and cached (in the input) details.
pub(crate) struct UsageNames {
    input: &'static str,
    output: &'static str,
    reasoning: &'static str,
    cached: &'static str,
}

/// A `ChatCompletion`'s `usage`.
pub(crate) const CHAT_USAGE: UsageNames = UsageNames {
    input: "prompt_tokens",
    output: "completion_tokens",
    reasoning: "/completion_tokens_details/reasoning_tokens",
    cached: "/prompt_tokens_details/cached_tokens",
};

/// A Response's `usage`.
pub(crate) const RESPONSE_USAGE: UsageNames = UsageNames {
    input: "input_tokens",
    output: "output_tokens",
    reasoning: "/output_tokens_details/reasoning_tokens",
    cached: "/input_tokens_details/cached_tokens",
};

/// A usage object's counts, read by `names` (reasoning tokens are
/// thinking, not output).
pub(crate) fn usage(u: &Value, names: &UsageNames) -> pb::Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0).max(0);
    let output = n(u.get(names.output));
    let reasoning = n(u.pointer(names.reasoning)).min(output);
    pb::Usage {
        input_tokens: n(u.get(names.input)),
        output_tokens: output - reasoning,
        thinking_tokens: reasoning,
        cached_tokens: n(u.pointer(names.cached)),
        cache_write_tokens: 0,
    }
}
