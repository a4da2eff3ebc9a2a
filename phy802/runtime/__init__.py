"""The plumbing under every command and library, one job per module: the output rule and atomic writes (output,
provenance, tempfiles), interrupts, worker pools, bounded input reading, JSON-ready values, progress, moved paths."""
