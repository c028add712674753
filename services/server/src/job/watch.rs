//! WatchJobs: the job event log as a watch stream ([`crate::tasks::tail`] does
//! the following), filtered to one ledger or to the caller's scope.

use super::convert::event_to_proto;
use crate::metrics::Metrics;
use crate::tasks::tail::Source;
use std::sync::Arc;
use tally_core::scope::Scope;
use tally_proto::v1 as pb;
use tally_store::Store;
use tally_store::event_log::Log;
use tally_store::types::JobEventRecord;

/// Which events one stream shows.
pub struct JobEvents {
    /// One ledger (read in the query), or all.
    pub ledger_id: Option<i64>,
    /// Of all, only the ledgers inside this scope (checked per event; the
    /// sequence still moves past the others).
    pub scope: Option<Arc<Scope>>,
}

impl Source for JobEvents {
    type Entry = JobEventRecord;
    type Message = pb::JobEvent;
    const LOG: Log = Log::Jobs;
    const BUFFER: usize = 16;

    async fn page(
        &self,
        store: &Store,
        after: i64,
        limit: i64,
    ) -> tally_store::Result<Vec<JobEventRecord>> {
        store.job_events_after(self.ledger_id, after, limit).await
    }

    fn seq(entry: &JobEventRecord) -> i64 {
        entry.seq
    }

    fn show(&self, entry: &JobEventRecord) -> Option<pb::JobEvent> {
        let shown = self.scope.as_ref().is_none_or(|s| s.ledger(&entry.ledger));
        shown.then(|| event_to_proto(entry))
    }
}

/// Counts a WatchJobs stream (`tally_watch_streams`) while its task runs.
pub struct Open(Metrics);

impl Open {
    pub fn new(metrics: Metrics) -> Self {
        metrics.watch_streams.inc();
        Open(metrics)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.watch_streams.dec();
    }
}
