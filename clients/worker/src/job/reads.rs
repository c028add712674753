//! A sent batch's later calls (its poll, the list searched for it, its
//! output's download) refused for good: a key revoked after submission,
//! an account that cannot pay. The ledger pauses with the provider's
//! words (AcquireCapacity `refused` on the job's claim) and the calls
//! space out, doubling to [`LONGEST`]; the job keeps its rows, whose batch
//! may have run, so nothing is sent again. They end when the provider
//! answers again, or the worker stops and another adopts the job.

use std::time::Duration;

use crate::ctx::Ctx;
use crate::job::end::JobError;
use crate::provider::ProviderError;
use crate::refusal::{Read, read_refused};
use crate::waits::LONGEST;

/// A job's refused reads in a row: the next wait.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    wait: Option<Duration>,
}

impl Refused {
    /// `e` ended a `read` of the job whose claim is `claim`: when no retry
    /// fixes it, the ledger is paused with the provider's words and the
    /// wait before the next read is answered (`first`, doubling in a row);
    /// `None` when it is no such refusal.
    pub(crate) async fn met(
        &mut self,
        ctx: &Ctx,
        claim: &str,
        read: Read,
        e: &ProviderError,
        first: Duration,
    ) -> Result<Option<Duration>, JobError> {
        let kind = ctx.provider.wire().classify(e);
        let Some(kind) = read_refused(read, e.code(), kind) else {
            return Ok(None);
        };
        let words = format!("the {} was refused: {e}", what(read));
        tracing::warn!(claim = %tally_core::names::claim_for_logs(claim), ?kind, "{words}; the ledger pauses and the job keeps its rows");
        super::calls::refuse(ctx, claim, kind, words).await?;
        Ok(Some(self.next(first)))
    }

    /// The wait after one more refusal in a row.
    fn next(&mut self, first: Duration) -> Duration {
        let wait = self.wait.map_or(first, |w| w * 2).min(LONGEST.max(first));
        self.wait = Some(wait);
        wait
    }

    /// A read was answered: the run of refusals is over.
    pub(crate) fn answered(&mut self) {
        self.wait = None;
    }
}

/// How the pause names a read.
fn what(read: Read) -> &'static str {
    match read {
        Read::Poll => "poll of a batch sent",
        Read::List => "list of batches searched for a lost create",
        Read::Download => "download of a batch's output",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: the waits between refused reads double from the first up
    // to LONGEST, and start over once a read is answered.
    #[test]
    fn waits_double_then_start_over() {
        let mut r = Refused::default();
        let first = Duration::from_secs(100);
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(r.next(first).as_secs());
        }
        assert_eq!(got, [100, 200, 400, 600, 600]);
        r.answered();
        assert_eq!(r.next(first), first);
    }
}
