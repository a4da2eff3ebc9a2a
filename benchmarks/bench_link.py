"""Benchmark: the composed link (bit-exact) and the codeword-level fast path.

Rates are simulated *line* Gb/s (all 16 PCS lanes x 10 bits per RS symbol = the 425 Gb/s line of
400GBASE-R) per second of wall time, single thread.  Measured in the same run:

* ``link``: :class:`phy802.link.Link`, KP4, 400G, 8 lanes, AWGN at pre-FEC BER 1e-4, random data
  blocks (payload ``frames`` is slower: frame building and FCS checks);
* ``pcs_only`` (baseline): the Clause 119 PCS transmit + receive of the same stream with no PMA and
  no channel -- what the link costs beyond the PCS/FEC it wraps;
* ``fast``: :class:`phy802.link.FastLink` at BER 1e-4 and codewords/s at BER 2.4e-4;
* ``galois`` (baseline): ``galois.ReedSolomon(1023, 993)`` (shortened to 544) decode of codewords with the error
  patterns the channel produces at 2.4e-4 (the work a conventional simulator does per codeword).

Allocator note: glibc hands large freed arrays back to the OS, so per-batch temporaries of a few
hundred kB are page-faulted in again on every batch (measured about as costly as the compute);
the PCS and the link therefore keep their internal buffers between calls.

Usage::

    python benchmarks/bench_link.py [--pairs 2048] [--fast-pairs 400000] [--repeat 3] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from phy802.channel import Pam4Awgn  # noqa: E402
from phy802.link import FastLink, Link, LinkConfig  # noqa: E402
from phy802.pcs import Blocks66, PcsReceiver, PcsTransmitter, SYNC_DATA  # noqa: E402


def _median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench_link(pairs: int, repeat: int) -> dict:
    cfg = LinkConfig(code="kp4", fec="ieee")
    link = Link(cfg, Pam4Awgn.from_ber(1e-4))
    link.run(8, seed=0)  # load kernels
    res = {}
    t = _median_time(lambda: res.__setitem__("r", link.run(pairs, seed=1, batch_pairs=256)), repeat)
    line_bits = res["r"].counters.line_bits
    # baseline: PCS TX + RX of the same amount of data, error-free, no PMA/channel
    pcs = cfg.pcs_config
    tx, rx = PcsTransmitter(pcs), PcsReceiver(pcs)
    rng = np.random.default_rng(2)
    n66 = 4 * pcs.data_blocks_257(256)
    blocks = Blocks66(np.full(n66, SYNC_DATA, np.uint8), rng.integers(0, 2**63, n66, dtype=np.uint64))

    def pcs_only():
        for _ in range(pairs // 256):
            rx(tx(blocks), frames=False)

    pcs_only()
    t_pcs = _median_time(pcs_only, repeat)
    return {
        "link_gbps": line_bits / t / 1e9,
        "pcs_only_gbps": 256 * (pairs // 256) * 10880 / t_pcs / 1e9,
        "link_over_pcs_time": t / t_pcs * (256 * (pairs // 256)) / pairs,
        "link_pairs": pairs,
        "link_pre_fec_ber": res["r"].counters.rates()["pre_fec_ber"].value,
    }


def bench_fast(pairs: int, repeat: int) -> dict:
    cfg = LinkConfig(code="kp4", fec="ieee")
    out = {}
    for ber, key in ((1e-4, "1e-4"), (2.4e-4, "2.4e-4")):
        fl = FastLink(cfg, Pam4Awgn.from_ber(ber))
        fl.run(64, seed=0)
        res = {}
        t = _median_time(lambda: res.__setitem__("r", fl.run(pairs, seed=1)), repeat)
        c = res["r"].counters
        out[f"fast_gbps@{key}"] = c.line_bits / t / 1e9
        out[f"fast_codewords_per_s@{key}"] = c.codewords / t
    return out


def bench_galois(n_words: int) -> dict:
    """galois decode of KP4 words carrying the symbol errors of BER 2.4e-4 (independent bits)."""
    import galois

    GF = galois.GF(2**10, irreducible_poly=0x409)
    rs = galois.ReedSolomon(1023, 993, field=GF, alpha=GF(2), c=0)  # shortened to 544 by the input length
    rng = np.random.default_rng(3)
    p_sym = 1 - (1 - 2.4e-4) ** 10
    err = rng.random((n_words, 544)) < p_sym
    words = np.where(err, rng.integers(1, 1024, (n_words, 544)), 0).astype(np.int64)  # sent word 0 + errors
    rs.decode(GF(words[:2]))  # JIT warm-up (several seconds in a new process)
    t = time.perf_counter()
    rs.decode(GF(words))
    dt = time.perf_counter() - t
    return {"galois_codewords_per_s": n_words / dt, "galois_gbps": n_words * 5440 / dt / 1e9}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2048, help="pairs for the bit-exact link (default 2048)")
    ap.add_argument("--fast-pairs", type=int, default=400_000, help="pairs for the fast path (default 400000)")
    ap.add_argument("--galois-words", type=int, default=2000, help="codewords for the galois baseline")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-galois", action="store_true", help="skip the galois baseline (slow start)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = {"threads": os.environ.get("NUMBA_NUM_THREADS"), "cpu_count": os.cpu_count()}
    r.update(bench_link(a.pairs, a.repeat))
    r.update(bench_fast(a.fast_pairs, a.repeat))
    r["fast_over_link_speed@1e-4"] = r["fast_gbps@1e-4"] / r["link_gbps"]
    if not a.no_galois:
        r.update(bench_galois(a.galois_words))
        r["fast_over_galois_codewords@2.4e-4"] = r["fast_codewords_per_s@2.4e-4"] / r["galois_codewords_per_s"]
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print("400G KP4, 8 lanes, PAM4 AWGN, single thread (shared machine)")
    print(f"  bit-exact Link @ BER 1e-4        {r['link_gbps']:8.3f} Gb/s of line   (target >= 1)")
    print(f"  baseline PCS TX+RX only          {r['pcs_only_gbps']:8.3f} Gb/s   -> link time / PCS time = {r['link_over_pcs_time']:.2f}x")
    print(f"  FastLink @ BER 1e-4              {r['fast_gbps@1e-4']:8.1f} Gb/s   -> {r['fast_over_link_speed@1e-4']:.0f}x the bit-exact link")
    print(f"  FastLink @ BER 2.4e-4            {r['fast_gbps@2.4e-4']:8.1f} Gb/s   = {r['fast_codewords_per_s@2.4e-4']:.3g} codewords/s")
    if not a.no_galois:
        print(f"  baseline galois decode @ 2.4e-4  {r['galois_codewords_per_s']:8.3g} codewords/s -> fast path is "
              f"{r['fast_over_galois_codewords@2.4e-4']:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
