-- Whether a ledger has any row asked again, in one index probe: the result
-- cache's lookups skip their check of rows being asked again when it has
-- none (queries/cache/find.sql).
CREATE INDEX superseded_results_ledger ON superseded_results (ledger_id);
