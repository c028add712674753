-- The rows a job was made with (RowFilter.in_job): the claim's rows when
-- CreateJob made the job from it. Unlike rows.job_id (the row's latest
-- job) this never changes, so a job's table still lists a row that a later
-- job carried again. A few thousand ids per job, written once.

ALTER TABLE jobs ADD COLUMN row_ids bigint[] NOT NULL DEFAULT '{}';

-- Jobs made before this column: the rows they recorded an attempt for,
-- and the rows their open claim still holds.
UPDATE jobs j SET row_ids = coalesce((
    SELECT array_agg(DISTINCT id ORDER BY id) FROM (
        SELECT a.row_id AS id FROM attempts a
        WHERE a.ledger_id = j.ledger_id AND a.job_id = j.id
        UNION
        SELECT unnest(c.row_ids) FROM claims c WHERE c.job_id = j.id
    ) ids
), '{}');
