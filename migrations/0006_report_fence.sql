-- A statement that must write all or nothing asserts its fence with this:
-- a false (or NULL) `ok` raises SQLSTATE TL001 with `what` as the message,
-- and the statement, with its transaction, rolls back.
--
-- The one-statement report (services/store/src/report.rs) decides each row
-- from what its claim found, writes only rows still RUNNING under the claim,
-- and asserts that it wrote every row it was given; when it did not (the
-- lease ran out, a row was released or already reported), nothing is kept
-- and the report reads the rows and decides again.
CREATE FUNCTION tally_assert(ok boolean, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION '%', what USING ERRCODE = 'TL001';
    END IF;
    RETURN true;
END
$$;
