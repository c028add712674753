-- Re-answers (issue 49): a SUCCEEDED row may be asked again, by an
-- operator's redrive that includes succeeded rows or, where the ledger's
-- policy asks (`rerun_dependants`), because a dependency whose answer it
-- used answered differently. The result it had is never overwritten: it is
-- kept here, by the version it was delivered as (`rows.result_version` moves
-- on when the row is reopened), with why it was asked again.
CREATE TABLE superseded_results (
    row_id         bigint      NOT NULL,
    ledger_id      bigint      NOT NULL,
    result_version integer     NOT NULL,
    result         text,
    response       text,
    -- `reanswer` (an operator asked) or `dependency_changed`.
    rule           text        NOT NULL,
    reason         text        NOT NULL DEFAULT '',
    actor          text        NOT NULL DEFAULT '',
    supersede_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (row_id, result_version)
);

-- An edge whose dependency answered differently after the dependant used
-- it, and the dependant was not asked again (the ledger does not ask for
-- it, or a row after it was already queued or held): its answer was made
-- from an input that changed. Cleared when the dependant is given its
-- inputs again.
ALTER TABLE row_deps ADD COLUMN changed boolean NOT NULL DEFAULT false;
CREATE INDEX row_deps_changed ON row_deps (ledger_id, row_id) WHERE changed;

-- How many succeeded rows a redrive asked again.
ALTER TABLE redrives ADD COLUMN reanswered bigint NOT NULL DEFAULT 0;
