-- Pausing ledgers (LedgerService.PauseLedger and ResumeLedger).
--
-- A paused ledger hands out no claims and makes no jobs; claims and jobs
-- already out run to their end (tally-core `pause` has the rules). The
-- pause is four columns of the ledger, all NULL while it is ACTIVE: the
-- claim statement checks `pause_reason` on the ledger row it already
-- reads by primary key, so a pause takes effect on every replica at once.
--
-- `pause_reason` is one of a fixed set: `operator` (PauseLedger), and for
-- the server itself `spend_cap`, `quota`, `billing`, `model_drift`.

ALTER TABLE ledgers
    ADD COLUMN pause_reason  text CHECK (pause_reason IN
        ('operator', 'spend_cap', 'quota', 'billing', 'model_drift')),
    ADD COLUMN pause_message text,
    ADD COLUMN pause_actor   text,
    ADD COLUMN pause_time    timestamptz,
    ADD CONSTRAINT ledgers_pause_whole CHECK (
        (pause_reason IS NULL) = (pause_time IS NULL));

-- Pauses and resumes are events of the job event log (WatchJobs), so
-- watchers see them in sequence with the jobs': such an event has no job
-- and carries `ledger`, a JSON object {"reason": …, "message": …} (reason
-- null for a resume).
ALTER TABLE job_events
    ALTER COLUMN job_id DROP NOT NULL,
    ALTER COLUMN job DROP NOT NULL,
    ADD COLUMN ledger jsonb,
    ADD CONSTRAINT job_events_subject CHECK ((job IS NULL) <> (ledger IS NULL)) NOT VALID;
