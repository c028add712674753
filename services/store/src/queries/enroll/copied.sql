-- After the rows of an enrollment went in by COPY (enroll/copy.rs, every one
-- PENDING without dependencies): their queue chunks and the ledger's new
-- models, as insert.sql's `queued` and `models` make them.
--
-- Parameters: $1 ledger id; $2 the rows' ids, $3 their models (an empty
-- array: all $4, the ledger's model); $5 models not yet listed for the
-- ledger, $6 the provider of each.
WITH queued AS (
    INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids)
    SELECT $1, coalesce(t.model, $4), now(), min(t.id), array_agg(t.id ORDER BY t.id)
    FROM unnest($2::int8[], $3::text[]) AS t(id, model)
    GROUP BY coalesce(t.model, $4), t.id / 128
)
INSERT INTO ledger_models (ledger_id, model, provider)
SELECT $1, m, p FROM unnest($5::text[], $6::text[]) AS t(m, p)
ON CONFLICT DO NOTHING
