//! The result cache, before a claim's rows go out (the claim says the
//! ledger uses it): each row's request as the provider's wire builds it,
//! its media by their hash ([`render::cache_request`]), asked of
//! SettleFromCache in calls of at most 1,000 rows and 8 MiB. The rows it
//! answers are settled there (SUCCEEDED, an attempt recorded as cached) and
//! never sent; the others go on, and their answers are cached once
//! reported. A lookup that fails gives the claim back (and the worker
//! claims nothing for `--refusal-cooldown`): a row it may have settled is
//! never sent as well.
//!
//! [`estimate`] is the dry run (`--cache-dry-run`): the ledger's unclaimed
//! rows rendered the same way and asked of EstimateFromCache, which writes
//! nothing.

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

/// What the result cache would answer of a ledger's unclaimed rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Estimate {
    /// PENDING and RETRYABLE rows of this worker's provider looked at.
    pub rows: u64,
    /// Rows the cache would answer, and what their answers cost first.
    pub hits: u64,
    pub saved_usd: f64,
    /// Rows it would not (sent when claimed), and rows whose request
    /// cannot be built (reported when claimed).
    pub misses: u64,
    /// Rows with dependencies: their requests carry answers not known yet.
    pub later: u64,
    /// Rows of another provider's models (another worker's).
    pub elsewhere: u64,
}

/// The dry run: every PENDING and RETRYABLE row of the ledger, rendered as
/// this worker would send it, asked of EstimateFromCache.
pub async fn estimate(ctx: &Ctx) -> Result<Estimate, Status> {
    let mut out = Estimate::default();
    let mut pages = super::RowPages::new(pb::RowFilter {
        statuses: vec![
            pb::RowStatus::Pending as i32,
            pb::RowStatus::Retryable as i32,
        ],
        ..Default::default()
    });
    while let Some(page) = pages.next(ctx).await? {
        let mut rows = Vec::new();
        for r in page {
            if tally_core::provider::route(&r.model).provider != ctx.args.provider {
                out.elsewhere += 1;
            } else if !r.depends_on.is_empty() {
                out.later += 1;
            } else {
                rows.push(pb::ClaimedRow {
                    key: r.key,
                    payload: r.payload,
                    prompt: r.prompt,
                    model: r.model,
                    ..Default::default()
                });
            }
        }
        out.rows += rows.len() as u64;
        let prompts = Prompts::fetch(ctx, &rows).await?;
        let requests: Vec<pb::CacheRequest> = rows
            .iter()
            .filter_map(|row| {
                let model = tally_core::provider::route(&row.model).model;
                render::cache_request(ctx, row, &prompts, model).map(|request| pb::CacheRequest {
                    key: row.key.clone(),
                    request,
                })
            })
            .collect();
        for chunk in chunks(&requests) {
            let req = pb::EstimateFromCacheRequest {
                parent: ctx.ledger.clone(),
                requests: chunk.to_vec(),
            };
            let got = with_retry(ctx.retry, "EstimateFromCache", || {
                let mut c = ctx.clients.ledgers.clone();
                let req = req.clone();
                async move { c.estimate_from_cache(req).await }
            })
            .await?
            .into_inner();
            out.hits += got.hits.len() as u64;
            out.saved_usd += got.saved_usd;
        }
    }
    out.misses = out.rows - out.hits;
    Ok(out)
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
