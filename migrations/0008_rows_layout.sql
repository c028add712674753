-- The rows table for one write per attempt (migration 0007).
--
-- * Fill factor 40. A claim no longer writes its rows, so the report (or
--   the release, or the rescue) is each attempt's only write of a row, and
--   it writes every row of a page at once (a claim takes consecutive ids).
--   For those updates to stay heap-only (no new entries in either index, and
--   a WAL record of the changed bytes only), a page needs room for a second
--   version of all its rows, result included: at 40% a page of ~500-byte
--   rows has it. Rows inserted before this keep their pages as they are.
-- * Keys compare byte by byte (collation "C"): keys are ASCII identifiers
--   (tally_core::keys), enrollments already sort them in byte order to take
--   the key index in one order (so two enrollments of the same keys queue
--   instead of deadlocking), and byte comparisons are what an index of
--   identifiers should pay for, not a locale's collation.

ALTER TABLE rows SET (fillfactor = 40);
ALTER TABLE rows ALTER COLUMN key TYPE text COLLATE "C";
