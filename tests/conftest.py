"""Shared pytest configuration: fixed seeds only; no test uses a global RNG."""

import os

# galois >= 0.4.8 opens an OpenMP region per Chien step; one thread keeps it fast and deterministic.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
