-- Providers (issue 32): each model of a ledger runs at exactly one provider
-- (`tally_core::provider::route`: `openai/gpt-4o`, `gpt-4o`, `claude-…`,
-- `vllm/meta-llama/…`, anything else Gemini). The store records it when a
-- model is first listed for a ledger, and a worker claims only its
-- provider's models. Models listed before this migration are routed by the
-- same rule when the store next starts (`Store::migrate`): NULL until then.
ALTER TABLE ledger_models ADD COLUMN provider text;
