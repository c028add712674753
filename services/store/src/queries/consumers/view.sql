-- A consumer as GetConsumer, ListConsumers and /metrics show it: its
-- settings and cursor, what it holds (leases, dead letters), its
-- acknowledged watermark and its lag (see consumers.rs). Followed by a
-- WHERE on `c` (and an ORDER BY and LIMIT).
--
-- `acked` mirrors tally_core::delivery::acked_position: below the oldest
-- lease, else the cursor. The lag counts the ledger's results after it
-- through `upto` (two index probes of result_log); its age is the time of
-- the first entry holding a result after it.
SELECT c.id, c.ledger_id, l.name AS ledger, c.name, c.kind, c.visibility_ms,
       c.max_deliveries, c.read_position, c.webhook_url, c.webhook_batch, c.failures,
       c.next_post_time, c.actor, c.create_time, c.update_time,
       s.in_flight, s.dead_letters, a.acked, g.lag_rows, g.oldest_unacked, now() AS now
FROM consumers c
JOIN ledgers l ON l.id = c.ledger_id
CROSS JOIN LATERAL (
    SELECT (SELECT count(*) FROM consumer_leases x WHERE x.consumer_id = c.id) AS in_flight,
           (SELECT min(x.position) FROM consumer_leases x WHERE x.consumer_id = c.id) AS oldest,
           (SELECT count(*) FROM consumer_dead_letters d WHERE d.consumer_id = c.id)
               AS dead_letters
) s
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.oldest IS NOT NULL AND s.oldest <= c.read_position
                THEN greatest(s.oldest - 1, 0) ELSE c.read_position END AS acked
) a
CROSS JOIN LATERAL (
    SELECT coalesce((SELECT e.upto FROM result_log e WHERE e.ledger_id = c.ledger_id
                     ORDER BY e.seq DESC LIMIT 1), 0)
           - coalesce((SELECT e.upto - e.n + least(a.acked & {{ORDINAL_MASK}}, e.n)
                       FROM result_log e
                       WHERE e.ledger_id = c.ledger_id AND e.seq = a.acked >> {{ORDINAL_BITS}}),
                      (SELECT e.upto FROM result_log e
                       WHERE e.ledger_id = c.ledger_id AND e.seq < a.acked >> {{ORDINAL_BITS}}
                       ORDER BY e.seq DESC LIMIT 1),
                      0) AS lag_rows,
           (SELECT e.time FROM result_log e
            WHERE e.ledger_id = c.ledger_id AND e.seq >= a.acked >> {{ORDINAL_BITS}}
              AND (e.seq > a.acked >> {{ORDINAL_BITS}} OR e.n > (a.acked & {{ORDINAL_MASK}}))
            ORDER BY e.seq LIMIT 1) AS oldest_unacked
) g
