-- tally_assert(ok, what) raised SQLSTATE TL001 when a settle's fence
-- missed. The settle statement now answers a fence miss as a count of
-- zero rows (services/store/src/queries/settle/settle.sql), so nothing
-- calls it.
DROP FUNCTION IF EXISTS tally_assert(boolean, text);
