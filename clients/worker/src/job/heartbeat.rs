//! A claim's heartbeat: ExtendClaim every `--heartbeat-interval` while
//! the job that holds the claim runs.

use std::sync::Arc;

use tally_client::with_retry;
use tally_core::names::claim_for_logs;
use tally_proto::v1 as pb;
use tokio::task::JoinHandle;
use tonic::Code;
use tracing::Instrument as _;

use crate::ctx::Ctx;

/// Extends a claim every heartbeat interval until dropped.
pub(crate) struct Heartbeat(JoinHandle<()>);

impl Heartbeat {
    pub(crate) fn start(ctx: &Arc<Ctx>, claim: &str) -> Self {
        let ctx = Arc::clone(ctx);
        let claim = claim.to_string();
        Heartbeat(tokio::spawn(async move {
            loop {
                tokio::time::sleep(ctx.args.heartbeat_interval).await;
                let req = pb::ExtendClaimRequest {
                    name: claim.clone(),
                    lease: ctx.lease(),
                };
                let got = with_retry(ctx.retry, "ExtendClaim", || {
                    let mut c = ctx.clients.ledgers.clone();
                    let req = req.clone();
                    async move { c.extend_claim(req).await }
                })
                .await;
                match got {
                    Ok(_) => {}
                    Err(s) if matches!(s.code(), Code::FailedPrecondition | Code::NotFound) => {
                        tracing::warn!(claim = %claim_for_logs(&claim), error = s.message(), "claim can no longer be extended");
                        return;
                    }
                    Err(s) => {
                        tracing::warn!(claim = %claim_for_logs(&claim), error = %s, "heartbeat failed")
                    }
                }
            }
        }.in_current_span()))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}
