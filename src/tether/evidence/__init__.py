"""What happened, provably: the keyed audit log, its keys, row digests and signed checkpoints."""
