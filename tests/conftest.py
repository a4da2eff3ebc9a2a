"""Shared pytest configuration: fixed seeds only; no test uses a global RNG; no test writes into
the user's home.

The suite runs with its own state folders, one per session, removed at its end: phy802's
(``PHY802_STATE_DIR``: the key and record of written files, see :func:`phy802.runtime.provenance.state_dir`)
and matplotlib's (``MPLCONFIGDIR``: its configuration and font cache).  Subprocesses inherit
them.  A session fixture lists everything under the real ``$HOME`` before the first test and after
the last, and fails the run, naming the paths, if anything there was created, changed or removed
(the Python installation is skipped: the interpreter may write its own bytecode caches there).
On a machine where other processes write into the same home while the tests run,
``PHY802_HOME_GUARD=warn`` turns that failure into a warning.
"""

import os
import shutil
import sys
import tempfile
import warnings

import pytest

from _home_guard import home_changes, home_snapshot

# galois >= 0.4.8 opens an OpenMP region per Chien step; one thread keeps it fast and deterministic.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

# Set before any test imports phy802 or matplotlib (both read these when first used).
_STATE_ROOT = tempfile.mkdtemp(prefix="phy802-tests-state-")
os.environ["PHY802_STATE_DIR"] = os.path.join(_STATE_ROOT, "phy802")
os.environ["MPLCONFIGDIR"] = os.path.join(_STATE_ROOT, "matplotlib")
_HOME = os.path.realpath(os.path.expanduser("~"))

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


def _skipped_in_home(root: str) -> set[str]:
    """Folders under ``$HOME`` not watched: the Python installation(s) running the tests, and the
    session's own temporary folders (when ``$TMPDIR`` or the checkout lies inside ``$HOME``)."""
    out = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, _STATE_ROOT,
                                         tempfile.gettempdir(), str(root))}
    return {p for p in out if p != _HOME}


@pytest.fixture(scope="session", autouse=True)
def _home_untouched(request):
    """Fail the run if anything under the real ``$HOME`` changed while the tests ran."""
    skip = _skipped_in_home(str(request.config.rootpath))
    before = home_snapshot(_HOME, skip)
    yield
    changes = home_changes(before, home_snapshot(_HOME, skip))
    # a folder's mtime changes with any entry created or removed in it: its entries name the cause
    named = [c for c in changes if not (c.startswith("changed ") and any(
        d.split(" ", 1)[1].startswith(c.split(" ", 1)[1] + os.sep) for d in changes))]
    msg = (f"the tests changed {len(named)} path(s) under $HOME ({_HOME}); tests must write only into their "
           f"own temporary folders: " + "; ".join(named[:20]))
    if named and os.environ.get("PHY802_HOME_GUARD") == "warn":  # other users' processes write there too
        warnings.warn(msg)
    else:
        assert not named, msg


def pytest_unconfigure(config):
    shutil.rmtree(_STATE_ROOT, ignore_errors=True)
