-- Deleting ledgers (LedgerService.DeleteLedger).
--
-- A delete is two steps, so that it never holds a long transaction and
-- survives a crash:
-- 1. One short transaction sets `ledgers.delete_time` (the ledger is
--    DELETING: every work RPC answers NOT_FOUND from then on, and its name
--    stays taken), closes its claims and jobs, and inserts its
--    `ledger_purges` row.
-- 2. Purgers (a background task in every server replica) delete everything
--    keyed by the ledger in bounded batches, one short transaction each,
--    and finally the ledger row and its `ledger_purges` row. A purger locks
--    the `ledger_purges` row for the length of one batch (FOR UPDATE SKIP
--    LOCKED), so replicas never work on one ledger at the same moment, and
--    a purge cut short by a crash resumes from what is committed.
--
-- `ledger_purges.cursor` is the last row key deleted (rows go in key order
-- through the (ledger_id, key) index), so each batch starts where the last
-- one ended instead of walking past the dead index entries of every batch
-- before it.

ALTER TABLE ledgers ADD COLUMN delete_time timestamptz;

CREATE TABLE ledger_purges (
    ledger_id      bigint      PRIMARY KEY,
    -- Deleted with force: live claims were expired and open jobs abandoned.
    forced         boolean     NOT NULL,
    actor          text        NOT NULL DEFAULT '',
    -- Rows the ledger had: NULL until the purge's first step has counted
    -- them (counting a big ledger takes seconds; the delete call does not
    -- wait for it). Live claims expired and open jobs abandoned by the mark
    -- (0 unless forced).
    rows_total     bigint,
    claims_expired integer     NOT NULL DEFAULT 0,
    jobs_abandoned integer     NOT NULL DEFAULT 0,
    rows_purged    bigint      NOT NULL DEFAULT 0,
    cursor         text COLLATE "C" NOT NULL DEFAULT '',
    batches        bigint      NOT NULL DEFAULT 0,
    update_time    timestamptz NOT NULL DEFAULT now()
);

-- The purge finds these tables' entries by ledger; the other ledger-keyed
-- tables already lead an index with ledger_id.
CREATE INDEX redrives_by_ledger ON redrives (ledger_id);
CREATE INDEX alert_outbox_by_ledger ON alert_outbox (ledger_id);
