-- Refusals that stop a ledger, and provider admission kept apart per
-- provider account and team (issues 29 and 30).
--
-- 1. Two more reasons a ledger pauses: `model` (the provider does not know
--    the model or takes no batches for it) and `refused` (any other refusal
--    no retry fixes; the provider's words are the message).
ALTER TABLE ledgers DROP CONSTRAINT ledgers_pause_reason_check;
ALTER TABLE ledgers ADD CONSTRAINT ledgers_pause_reason_check CHECK (pause_reason IN
    ('operator', 'spend_cap', 'quota', 'billing', 'model_drift', 'model', 'refused'));

-- 2. A job records the provider account its worker sends to (an opaque name
--    the worker derives from its key, never the key) and the team that made
--    it (the CreateJob caller's principal; '' without auth). A cool-down is
--    kept per account and model, so a refusal in one account never holds
--    another back; admission shares a model's quota between teams.
ALTER TABLE jobs ADD COLUMN provider_account text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN team text NOT NULL DEFAULT '';

ALTER TABLE model_cooldowns DROP CONSTRAINT model_cooldowns_pkey;
ALTER TABLE model_cooldowns ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE model_cooldowns ADD PRIMARY KEY (account, model);
