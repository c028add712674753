//! The names tally gives what it makes at the provider, so a search can
//! find them again and the janitor can tell its own from anyone else's:
//! a job's input file and its batch are both `tally/{ledger}/{job id}`;
//! a probe batch (a witness, see [`crate::lookup`]) is
//! `tally-probe/{ledger}/{id}`.
//!
//! Anthropic's batches carry no tag, and a request's `custom_id` must match
//! `^[a-zA-Z0-9_-]{1,64}$`, which tally keys need not. So a request's
//! custom_id is derived from its job and its key ([`custom_id`]): the job's
//! *mark* (12 hex digits of the SHA-256 of the job id) then `-` and the
//! key when it fits, or `_` and 40 hex digits of the key's SHA-256. An
//! ended batch's results name their custom_ids, so its first line says
//! whose batch it is ([`mark_of`]).

/// The display name of a job's input file and batch.
pub fn display_name(ledger: &str, job_id: &str) -> String {
    format!("{}{job_id}", job_prefix(ledger))
}

/// What every display name of this ledger's jobs starts with.
pub fn job_prefix(ledger: &str) -> String {
    format!("tally/{}/", ledger.trim_start_matches("ledgers/"))
}

/// The names a job's batch may carry: [`display_name`], or the bare job id
/// (what batches made before the ledger was in the name carry).
pub fn batch_names(ledger: &str, job_id: &str) -> Vec<String> {
    vec![display_name(ledger, job_id), job_id.to_owned()]
}

/// The display name of a probe batch made by a worker of `ledger`.
pub fn probe_name(ledger: &str, id: &str) -> String {
    format!("{}{id}", probe_prefix(ledger))
}

/// What the display names of this ledger's probes start with.
pub fn probe_prefix(ledger: &str) -> String {
    format!("tally-probe/{}/", ledger.trim_start_matches("ledgers/"))
}

/// How a job's requests are named at its provider: by their keys, or by
/// ids made from the job's mark and the keys (where the provider
/// restricts ids: [`crate::provider::Wire::derives_request_ids`]).
#[derive(Debug, Clone)]
pub struct RequestIds {
    mark: Option<String>,
}

impl RequestIds {
    /// The ids of `job_id`'s requests: derived from its mark and the keys
    /// when `derived` (the provider restricts ids), else the keys.
    pub fn of(derived: bool, job_id: &str) -> Self {
        Self {
            mark: derived.then(|| job_mark(job_id)),
        }
    }

    /// The id `key`'s request carries.
    pub fn id<'k>(&self, key: &'k str) -> std::borrow::Cow<'k, str> {
        match &self.mark {
            Some(mark) => custom_id(mark, key).into(),
            None => key.into(),
        }
    }

    /// The key of each request id of `keys`; `None` where the ids are the
    /// keys.
    pub fn back<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Option<std::collections::HashMap<String, String>> {
        let mark = self.mark.as_ref()?;
        Some(
            keys.into_iter()
                .map(|k| (custom_id(mark, k), k.to_owned()))
                .collect(),
        )
    }
}

/// Digits of a job's mark.
const MARK: usize = 12;

/// Longest key sent as itself in a custom_id (64 less the mark and `-`).
const MAX_PLAIN_KEY: usize = 64 - MARK - 1;

/// The 12 hex digits that mark `job_id`'s requests.
pub fn job_mark(job_id: &str) -> String {
    let mut mark = hex_sha256(job_id);
    mark.truncate(MARK);
    mark
}

/// The custom_id of `key`'s request in the batch of the job `mark` marks.
pub fn custom_id(mark: &str, key: &str) -> String {
    if let Some(encoded) = key.strip_prefix(GOLDEN_PREFIX).and_then(encode_golden) {
        return format!("{mark}g{encoded}");
    }
    let plain = !key.is_empty()
        && key.len() <= MAX_PLAIN_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("{mark}-{key}")
    } else {
        format!("{mark}_{}", &hex_sha256(key)[..40])
    }
}

/// The key prefix of a golden row's line in a batch: `#` is never in a
/// row's key, so the two never meet.
pub const GOLDEN_PREFIX: &str = "#golden/";

/// A golden row's key in custom_id characters (letters, digits and `-`
/// kept, any other byte as `_` and two hex digits), when it fits; read
/// back by [`golden_key`], so any worker (an adopter too, which is not
/// told the job's golden rows) knows a golden answer.
fn encode_golden(key: &str) -> Option<String> {
    let mut out = String::new();
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    (!out.is_empty() && out.len() <= MAX_PLAIN_KEY).then_some(out)
}

/// The golden row key (`#golden/{key}`) a custom_id made by
/// [`custom_id`] carries, if it carries one.
pub fn golden_key(custom_id: &str) -> Option<String> {
    let (mark, rest) = custom_id.split_at_checked(MARK)?;
    if !mark.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let encoded = rest.strip_prefix('g')?.as_bytes();
    let mut key = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'_' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            key.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            key.push(encoded[i]);
            i += 1;
        }
    }
    Some(format!("{GOLDEN_PREFIX}{}", String::from_utf8(key).ok()?))
}

/// The job mark a custom_id carries, if it is one [`custom_id`] made.
pub fn mark_of(custom_id: &str) -> Option<&str> {
    let (mark, rest) = custom_id.split_at_checked(MARK)?;
    let derived = mark
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        && (rest.starts_with('-') || rest.starts_with('_') || rest.starts_with('g'))
        && rest.len() > 1;
    derived.then_some(mark)
}

fn hex_sha256(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: every custom_id matches Anthropic's pattern whatever the
    // key, two keys of a job never share one, two jobs never share a mark
    // (by construction, up to SHA-256), and the mark is read back.
    #[test]
    fn custom_ids_fit_the_pattern_and_carry_the_job() {
        let ok = |id: &str| {
            (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        let m = job_mark("0195f3c2-7d1e-7000-8000-000000000001");
        assert_eq!(m.len(), MARK);
        assert_ne!(m, job_mark("0195f3c2-7d1e-7000-8000-000000000002"));
        let long = "k".repeat(MAX_PLAIN_KEY);
        let keys = [
            "row-1",
            "row_1",
            long.as_str(),
            &"k".repeat(MAX_PLAIN_KEY + 1),
            "pages/0001.png",
            "#golden/g1",
            "ünïcode",
        ];
        let ids: Vec<String> = keys.iter().map(|k| custom_id(&m, k)).collect();
        for (key, id) in keys.iter().zip(&ids) {
            assert!(ok(id), "{key} → {id}");
            assert_eq!(mark_of(id), Some(m.as_str()), "{id}");
        }
        assert_eq!(ids[0], format!("{m}-row-1"));
        assert_eq!(ids[2], format!("{m}-{long}"));
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        assert_eq!(mark_of("tally-probe"), None);
        assert_eq!(mark_of("row-1"), None);
        assert_eq!(mark_of(&format!("{m}-")), None);
        let ids = RequestIds::of(true, "j");
        let back = ids.back(["a/b", "c"]).unwrap();
        assert_eq!(back[ids.id("a/b").as_ref()], "a/b");
        assert_eq!(back[ids.id("c").as_ref()], "c");
        // A golden row's id says its key by itself; a long one is hashed.
        let golden = ids.id("#golden/a.b:c_d");
        assert!(ok(&golden), "{golden}");
        assert_eq!(golden_key(&golden).as_deref(), Some("#golden/a.b:c_d"));
        assert_eq!(golden_key(ids.id("a/b").as_ref()), None);
        assert_eq!(golden_key(ids.id("gold").as_ref()), None);
        let long = format!("#golden/{}", ".".repeat(20));
        assert!(ok(&ids.id(&long)) && golden_key(&ids.id(&long)).is_none());
        let plain = RequestIds::of(false, "j");
        assert_eq!(plain.id("a/b"), "a/b");
        assert!(plain.back(["a/b"]).is_none());
    }

    #[test]
    fn names_carry_the_ledger_and_the_job() {
        assert_eq!(display_name("ledgers/x", "j1"), "tally/x/j1");
        assert_eq!(display_name("x", "j1"), "tally/x/j1");
        assert!(display_name("x", "j1").starts_with(&job_prefix("ledgers/x")));
        assert_eq!(batch_names("x", "j1"), ["tally/x/j1", "j1"]);
        assert_eq!(probe_name("ledgers/x", "p"), "tally-probe/x/p");
        assert!(!probe_name("x", "p").starts_with(&job_prefix("x")));
    }
}
