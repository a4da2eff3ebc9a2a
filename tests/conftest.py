"""Shared pytest configuration: fixed seeds only; no test uses a global RNG."""

import os

# galois >= 0.4.8 opens an OpenMP region per Chien step; one thread keeps it fast and deterministic.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

# Property tests draw from a fixed seed (derandomize): a CI run explores the same examples as the
# last local run, so a failure it reports is reproducible here; set PHY802_HYPOTHESIS=explore to
# search new examples locally (that is how the leading-zeros lanes bug was found).
try:
    from hypothesis import settings as _hyp_settings
except ImportError:  # hypothesis is a test extra; tests that need it import it themselves
    pass
else:
    _hyp_settings.register_profile("fixed", derandomize=True, database=None)
    _hyp_settings.register_profile("explore")
    _hyp_settings.load_profile("explore" if os.environ.get("PHY802_HYPOTHESIS") == "explore" else "fixed")
