"""Values and pure rules every part shares: principals, run records and statuses, the effect
ledger, approvals, budgets, screening, digests."""
