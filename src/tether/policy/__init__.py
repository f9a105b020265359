"""Whether a call may run: rules, the policy file, data flow, provenance and Cedar."""
