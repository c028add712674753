//! How a job task ends, and what can stop it: shared by the job's steps
//! (`create`, `reconcile`) and the loop that runs them (`job`, `worker`).

use tonic::Status;

use crate::provider::ProviderError;

/// How a job task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEnd {
    /// FinishJob closed it (by this worker, or it was already closed).
    Reconciled,
    /// Its rows went back unworked (shutdown, ledger full, nothing sent).
    Released,
    /// Every row was answered from the result cache: nothing was sent.
    Cached,
    /// Shutdown after submission: another worker adopts it.
    LeftForAdoption,
    /// The claim was lost (another worker adopted the job, or the lease
    /// lapsed): nothing more this worker may do.
    Lost,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("tally: {0}")]
    Rpc(#[from] Status),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}
