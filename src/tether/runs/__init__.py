"""Durable runs: the runner, leases, the run log, workers, reconciliation, recovery and
cancellation."""
