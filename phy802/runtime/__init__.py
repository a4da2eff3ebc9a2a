"""The plumbing under every command and library, one job per module: the output rule and atomic writes (output,
provenance, tempfiles), interrupts, worker pools, resource checks, bounded input reading, JSON values, progress, moved paths."""
