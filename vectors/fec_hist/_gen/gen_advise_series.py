"""Regenerate vectors/fec_hist/advise_fabric24_t*.out: a series of cumulative SONiC ``portstat -fh``
snapshots of a 24-port switch for ``phy802 advise`` (deterministic; SIMULATED, not measurements).

Every port has independent errors (binomial codeword law, drawn with
:func:`phy802.fec.tail.sample_histogram`, seed 44): 20 ports at pre-FEC BER 1e-5 and 4 at 6e-5;
``Ethernet0`` degrades to 1e-4 and 1.2e-4 in intervals 2 and 3, ``Ethernet20`` to 2e-4 in interval 4
(1e8 KP4 codewords per port and interval).
Run: ``python vectors/fec_hist/_gen/gen_advise_series.py [OUTDIR]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from phy802 import theory  # noqa: E402
from phy802.fec.tail import sample_histogram  # noqa: E402

SEED = 44
CODEWORDS = 10**8


def portstat(rows: dict[str, list[int]]) -> str:
    """A SONiC ``portstat -fh`` table (thousands commas, the layout of example_switch64_portstat_*.out)."""
    hdr = ["IFACE", "STATE"] + [f"BIN{i}" for i in range(16)]
    body = [hdr] + [[name, "U"] + [f"{v:,}" for v in counts] for name, counts in rows.items()]
    w = [max(len(r[j]) for r in body) for j in range(len(hdr))]
    out = ["  ".join(c.rjust(w[j]) if j >= 2 else c.ljust(w[j]) for j, c in enumerate(r)).rstrip() for r in body]
    out.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(out) + "\n"


def fabric_snapshots(bers: list[list[float]], codewords: int = CODEWORDS, seed: int = SEED) -> list[str]:
    """Cumulative snapshots (starting from all-zero counters): ``bers[i][j]`` is port j's pre-FEC BER over
    interval i (independent bit errors); ports are named Ethernet0, Ethernet4, ..."""
    rng = np.random.default_rng(seed)
    cum = {f"Ethernet{4 * j}": [0] * 16 for j in range(len(bers[0]))}
    snaps = [portstat(cum)]
    for row in bers:
        for j, b in enumerate(row):
            h = sample_histogram("binomial", {"p_symbol": float(theory.symbol_error_prob(b))}, "kp4", codewords, rng)
            name = f"Ethernet{4 * j}"
            cum[name] = [c + x.count for c, x in zip(cum[name], h.bins)]
        snaps.append(portstat(cum))
    return snaps


def series_bers() -> list[list[float]]:
    base = [1e-5] * 20 + [6e-5] * 4
    rows = [list(base) for _ in range(6)]
    rows[2][0], rows[3][0], rows[4][5] = 1e-4, 1.2e-4, 2e-4
    return rows


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "vectors" / "fec_hist"
    for i, text in enumerate(fabric_snapshots(series_bers())):
        (out / f"advise_fabric24_t{i}.out").write_text(text, encoding="utf-8")
