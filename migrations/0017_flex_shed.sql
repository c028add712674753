-- When a ledger's flex calls were last shed (issue 48): until then its
-- routing treats flex as unavailable, so the rows go to another lane the
-- ledger allows instead of waiting to be shed again.

ALTER TABLE ledgers ADD COLUMN flex_shed_until timestamptz;
