"""Regenerate the PCS known-answer vectors: ``python vectors/pcs/_gen/gen_pcs_vectors.py [OUTDIR]``.

Writes ``transcode257.txt``, ``scrambler.txt``, ``am_400g.txt``, ``am_200g.txt`` and
``pair_{400g,200g}_{idle,counter}.txt`` (formats: :mod:`phy802.pcs.vectors`).  Deterministic
(fixed seed), so rerunning it on an unchanged implementation reproduces the files exactly.
"""

import sys
from pathlib import Path

from phy802.pcs.vectors import verify_dir, write_vectors

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    for p in write_vectors(out):
        print(p)
    bad = [r for r in verify_dir(out) if not r.ok]
    sys.exit(1 if bad else 0)
