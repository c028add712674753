//! The result cache, before a claim's rows go out (the claim says the
//! ledger uses it): each row's request as the provider's wire builds it,
//! its media by their hash ([`render::cache_request`]), asked of
//! SettleFromCache in calls of at most 1,000 rows and 8 MiB. The rows it
//! answers are settled there (SUCCEEDED, an attempt recorded as cached) and
//! never sent; the others go on, and their answers are cached once
//! reported. A lookup that fails gives the claim back: a row it may have
//! settled is never sent as well.

use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tonic::Status;

use super::render::{self, Prompts};
use crate::ctx::Ctx;

/// The most request bytes in one SettleFromCache call.
const MAX_LOOKUP_BYTES: usize = 8 << 20;

/// `rows` without those the cache answered (settled by tally).
pub(crate) async fn settle_hits(
    ctx: &Ctx,
    claim: &pb::Claim,
    rows: Vec<pb::ClaimedRow>,
    prompts: &Prompts,
    model: &str,
) -> Result<Vec<pb::ClaimedRow>, Status> {
    if !claim.result_cache {
        return Ok(rows);
    }
    let at_provider = tally_core::provider::route(model).model;
    let requests: Vec<pb::CacheRequest> = rows
        .iter()
        .filter_map(|row| {
            render::cache_request(ctx, row, prompts, at_provider).map(|request| pb::CacheRequest {
                key: row.key.clone(),
                request,
            })
        })
        .collect();
    let mut hits = std::collections::HashSet::new();
    let (mut misses, mut saved) = (0, 0.0);
    for chunk in chunks(&requests) {
        let req = pb::SettleFromCacheRequest {
            claim: claim.name.clone(),
            requests: chunk.to_vec(),
        };
        let got = with_retry(ctx.retry, "SettleFromCache", || {
            let mut c = ctx.clients.ledgers.clone();
            let req = req.clone();
            async move { c.settle_from_cache(req).await }
        })
        .await?
        .into_inner();
        misses += got.misses;
        saved += got.saved_usd;
        hits.extend(got.hits);
    }
    if !hits.is_empty() {
        tracing::info!(
            claim = %claim_for_logs(&claim.name),
            hits = hits.len(),
            misses,
            saved_usd = saved,
            "rows answered from the result cache"
        );
    }
    Ok(rows
        .into_iter()
        .filter(|r| !hits.contains(&r.key))
        .collect())
}

/// `requests` cut, in order, into calls of at most 1,000 requests and
/// [`MAX_LOOKUP_BYTES`] (a request is at most 1 MiB).
fn chunks(requests: &[pb::CacheRequest]) -> Vec<&[pb::CacheRequest]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in requests.iter().enumerate() {
        let len = r.request.len() + r.key.len() + 16;
        if i > start
            && (i - start == tally_core::cache::MAX_LOOKUPS || bytes + len > MAX_LOOKUP_BYTES)
        {
            out.push(&requests[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < requests.len() {
        out.push(&requests[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: every request is asked once, in order, in calls within
    // both bounds.
    #[test]
    fn lookups_are_cut_by_count_and_bytes() {
        let r = |n: usize| pb::CacheRequest {
            key: "k".into(),
            request: "x".repeat(n),
        };
        let many: Vec<_> = (0..2500).map(|_| r(10)).collect();
        let cut = chunks(&many);
        assert_eq!(
            cut.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        let big: Vec<_> = (0..20).map(|_| r(1 << 20)).collect();
        let cut = chunks(&big);
        assert_eq!(cut.iter().map(|c| c.len()).sum::<usize>(), 20);
        assert!(cut.iter().all(|c| c.len() <= 7));
        assert!(chunks(&[]).is_empty());
    }
}
