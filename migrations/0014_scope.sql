-- Team scopes (tally_core::scope): whether an id is inside a caller's
-- scope, given as exact ids and prefixes (`*` is the empty prefix). Lists
-- that a scoped caller reads (ListLedgers, ListOperations) filter with it;
-- everything else checks the one name a request carries before it reaches
-- the database.
CREATE FUNCTION tally_in_scope(id text, exact text[], prefixes text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT id = ANY (exact)
        OR EXISTS (SELECT 1 FROM unnest(prefixes) AS p WHERE starts_with(id, p))
$$;
