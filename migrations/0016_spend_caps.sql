-- Spend caps (tally_core::spend). `ledger_spend` holds what the reported
-- rows of a capped ledger spent (actual usage, priced) and the highest spend
-- alert sent; `claim_reservations` holds each capped claim's estimated spend
-- per row. What is reserved now is read through the claims: a claim's
-- share times the rows it still holds (`claims.held`, 0 once it is done or
-- expired), so rows reported, released or rescued stop being reserved in
-- the statements that already move them.
CREATE TABLE ledger_spend (
    ledger_id     bigint           PRIMARY KEY REFERENCES ledgers (id) ON DELETE CASCADE,
    cost_usd      double precision NOT NULL DEFAULT 0,
    input_tokens  bigint           NOT NULL DEFAULT 0,
    output_tokens bigint           NOT NULL DEFAULT 0,
    -- 0 no alert yet, 1 the warning was sent, 2 the cap-reached alert was
    -- sent (back to 0 when a claim finds the spend below the warning again:
    -- the cap was raised).
    alerted       smallint         NOT NULL DEFAULT 0
);

CREATE TABLE claim_reservations (
    token         uuid             PRIMARY KEY REFERENCES claims (token) ON DELETE CASCADE,
    ledger_id     bigint           NOT NULL,
    cost_usd      double precision NOT NULL,
    input_tokens  bigint           NOT NULL,
    output_tokens bigint           NOT NULL
);
CREATE INDEX claim_reservations_ledger ON claim_reservations (ledger_id);
