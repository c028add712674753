-- Rows by ledger and status, for /metrics, without counting them.
--
-- `rows` has no index on status, and a count per ledger and status reads
-- every row of the ledger: seconds at ten million rows, too much for a
-- gauge refreshed every few seconds. The planner's multivariate
-- most-common-values list on (ledger_id, status), kept by ANALYZE, gives
-- each pair's share of a sample of the table; times `reltuples` it is an
-- estimate of the pair's rows (exact while the table is smaller than the
-- sample, 300 × the statistics target). A statistics target of 1000 keeps
-- up to 1000 pairs (about 160 ledgers with every status).
CREATE STATISTICS rows_ledger_status (mcv) ON ledger_id, status FROM rows;
ALTER STATISTICS rows_ledger_status SET STATISTICS 1000;

-- ANALYZE after 1% of the rows changed (the default, 10%, would leave the
-- estimate a million rows behind at ten million).
ALTER TABLE rows SET (autovacuum_analyze_scale_factor = 0.01);
