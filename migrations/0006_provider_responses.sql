-- The provider's own answer to a row that SUCCEEDED (issue 32): for an
-- OpenAI-shaped batch, the output line's `response` object (`status_code`,
-- `request_id`, `body`), as the worker read it, so `tallyctl export --format
-- openai` writes the bodies the provider returned rather than ones built
-- from the result. NULL when none was kept (Gemini and Anthropic workers
-- keep none; rows that succeeded before this migration). Written with the
-- result by the settling statement (once: a SUCCEEDED row is never settled
-- again), at most 1 MiB (the server's bound); TOASTed like `result`.
ALTER TABLE rows ADD COLUMN response text;
