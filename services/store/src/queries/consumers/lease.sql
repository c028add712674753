-- The write of a receive (see consumers.rs, `receive`), under the
-- consumer's row lock: leases handed out again, new leases, superseded
-- leases dropped, leases dead-lettered, and the cursor moved. Answers each
-- result handed out with its delivery count and when it is visible again.
--
-- Parameters:
--   $1 consumer id, $2 visibility (ms),
--   $3 positions handed out again,
--   $4 $5 $6 positions, row ids and versions newly leased,
--   $7 positions whose leases are dropped (superseded),
--   $8 positions dead-lettered, $9 why,
--   $10 the new cursor (NULL: unchanged).
WITH again AS (
    UPDATE consumer_leases SET deliveries = deliveries + 1,
           visible_time = now() + $2 * interval '1 millisecond'
    WHERE consumer_id = $1 AND position = ANY($3)
    RETURNING position, deliveries, visible_time
), leased AS (
    INSERT INTO consumer_leases (consumer_id, position, row_id, version, visible_time)
    SELECT $1, u.position, u.row_id, u.version, now() + $2 * interval '1 millisecond'
    FROM unnest($4::int8[], $5::int8[], $6::int4[]) AS u(position, row_id, version)
    RETURNING position, deliveries, visible_time
), dropped AS (
    DELETE FROM consumer_leases WHERE consumer_id = $1 AND position = ANY($7)
), dead AS (
    DELETE FROM consumer_leases WHERE consumer_id = $1 AND position = ANY($8)
    RETURNING consumer_id, position, row_id, version, deliveries
), buried AS (
    INSERT INTO consumer_dead_letters (consumer_id, position, row_id, version, deliveries, reason)
    SELECT consumer_id, position, row_id, version, deliveries, $9 FROM dead
    ON CONFLICT (consumer_id, position) DO UPDATE
        SET row_id = EXCLUDED.row_id, version = EXCLUDED.version,
            deliveries = EXCLUDED.deliveries, reason = EXCLUDED.reason, time = now()
), moved AS (
    UPDATE consumers SET read_position = $10, update_time = now()
    WHERE id = $1 AND $10 IS NOT NULL
)
SELECT position, deliveries, visible_time FROM again
UNION ALL
SELECT position, deliveries, visible_time FROM leased
