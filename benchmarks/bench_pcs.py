"""Benchmark: Clause 119 PCS transmit + receive with RS(544,514) in correct mode, error-free.

Rates are Gb/s of *line* bits (PCS lanes x symbols x 10; the real 400GBASE-R line is 425 Gb/s).
Baselines measured in the same run:

* ``fec_only``: the RS encode + decode of the same codewords (what the PCS adds on top of FEC);
* ``numpy_scrambler``: a plain-numpy bit-array scrambler (one bit array, shifted XORs per 39-bit
  chunk) against the Numba word kernel on the same stream.

Single-threaded (NUMBA_NUM_THREADS=1 is forced).  ``--stages`` adds a per-stage table (each
stage timed alone on the same data, median of ``--repeat``; the sum differs a little from the
chained TX/RX times through cache effects).  Usage::

    python benchmarks/bench_pcs.py [--pairs 2000] [--repeat 5] [--rate 400G] [--stages] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from phy802.fec import KP4, decode, encode  # noqa: E402
from phy802.pcs import PcsConfig, PcsReceiver, PcsTransmitter, frames_to_blocks  # noqa: E402
from phy802.pcs.scrambler import scramble  # noqa: E402
from phy802.pcs.transcode257 import bits_of, words_of  # noqa: E402


def numpy_scramble(d: np.ndarray) -> np.ndarray:
    """Plain-numpy baseline: s_n = d_n ^ s_{n-39} ^ s_{n-58}, 39 bits per vector step, zero seed."""
    s = np.zeros(d.size + 58, np.uint8)
    s[58:] = d
    for c in range(58, s.size, 39):
        e = min(c + 39, s.size)
        s[c:e] ^= s[c - 39:e - 39] ^ s[c - 58:e - 58]
    return s[58:]


def _time(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def stage_times(cfg: PcsConfig, blocks, repeat: int) -> dict[str, float]:
    """Milliseconds per stage of one TX and one RX call (the kernels the two classes chain)."""
    from phy802.pcs import _kernels as K
    from phy802.pcs.alignment import lock_lanes
    from phy802.pcs.distribution import deinterleave, interleave
    from phy802.pcs.scrambler import seed_to_history
    from phy802.pcs.transcode257 import decode_257, words_for_bits
    from phy802.pcs.transmit import _VALID_TYPE, am_pair_flags
    from phy802.pcs.codec66 import IDLE_PAYLOAD

    tx, rx = PcsTransmitter(cfg), PcsReceiver(cfg)
    res = tx.transmit(blocks)
    P = res.n_pairs
    n257 = cfg.data_blocks_257(P)
    hist = seed_to_history(cfg.scrambler_seed)
    data = np.empty(words_for_bits(257 * n257), np.uint64)
    data[-1] = 0
    am = am_pair_flags(cfg, P)
    aw = tx._am_words[: int(am.sum())]
    go = np.cumsum(am) - 1
    msgs = np.empty((P, 2, 514), np.uint16)
    K.tx_transcode_scramble(blocks.sync, blocks.payload, n257, _VALID_TYPE, IDLE_PAYLOAD, hist, data)
    K.data_to_messages(data, aw, am, go, cfg.am_bits, msgs)
    cw = res.codewords
    L = cfg.symbols_per_pair
    rx_cw = deinterleave(res.lanes, cfg.rate)
    dec, _ = decode(KP4, rx_cw)
    d2 = np.empty_like(data)
    am_out = np.zeros((aw.shape[0], words_for_bits(cfg.am_bits)), np.uint64)
    K.messages_to_data(dec, am, cfg.am_bits, d2, am_out)
    d3 = d2.copy()
    K.descramble(d3, 257 * n257, hist)
    t = {
        "TX validate+pad+transcode+scramble": lambda: K.tx_transcode_scramble(
            blocks.sync, blocks.payload, n257, _VALID_TYPE, IDLE_PAYLOAD, hist, data),
        "TX AM insertion + 10-bit split (A/B)": lambda: K.data_to_messages(data, aw, am, go, cfg.am_bits, msgs),
        "TX RS encode (phy802.fec)": lambda: encode(KP4, msgs),
        "TX 119.2.4.7 interleave": lambda: interleave(cw, cfg.rate),
        "RX lock + deskew": lambda: lock_lanes(res.lanes, rx._am_syms, cfg.period_pairs * L, L,
                                               cfg.am_lock_tolerance, _view_ok=True),
        "RX de-interleave": lambda: deinterleave(res.lanes, cfg.rate),
        "RX RS decode (phy802.fec)": lambda: decode(KP4, rx_cw),
        "RX 10-bit join + AM removal": lambda: K.messages_to_data(dec, am, cfg.am_bits, d2, am_out),
        "RX descramble": lambda: K.descramble(d2.copy(), 257 * n257, hist),
        "RX 257b -> 66b": lambda: decode_257(d3, n257),
    }
    return {k: 1e3 * _time(f, repeat) for k, f in t.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000, help="approximate codeword pairs per run (default 2000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions; the median is reported")
    ap.add_argument("--rate", choices=["400G", "200G"], default="400G")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--stages", action="store_true", help="also time each stage alone (table)")
    a = ap.parse_args(argv)

    cfg = PcsConfig(rate=a.rate)
    rng = np.random.default_rng(a.seed)
    # random frames of 64..1518 octets until ~a.pairs pairs are filled
    frames, blocks66 = [], 0
    target = a.pairs * 160 * 0.97
    while blocks66 < target:
        n = int(rng.integers(60, 1515))
        frames.append(rng.bytes(n))
        blocks66 += (n + 4) // 8 + 3
    blocks = frames_to_blocks(frames)
    tx, rx = PcsTransmitter(cfg), PcsReceiver(cfg)
    res = tx.transmit(blocks)  # warm-up (JIT) and correctness check
    out = rx(res.lanes)
    n = len(blocks)
    assert (out.blocks.sync[:n] == blocks.sync).all() and (out.blocks.payload[:n] == blocks.payload).all()
    assert out.frames.frames == frames
    P = res.n_pairs
    line_bits = res.lanes.size * 10

    t_tx = _time(lambda: tx.transmit(blocks), a.repeat)
    lanes = res.lanes
    t_rx = _time(lambda: rx(lanes, frames=False), a.repeat)
    t_rxf = _time(lambda: rx(lanes, frames=True), a.repeat)
    rx_bypass = PcsReceiver(PcsConfig(rate=a.rate, decode_mode="bypass"))
    rx_bypass(lanes)
    t_rxb = _time(lambda: rx_bypass(lanes, frames=False), a.repeat)
    msgs = res.codewords[:, :, :514].reshape(-1, 514).copy()
    cws = res.codewords.reshape(-1, 544).copy()
    t_fec = _time(lambda: (encode(KP4, msgs), decode(KP4, cws)), a.repeat)

    nbits = 257 * 40 * min(P, 500)
    d = np.random.default_rng(2).integers(0, 2, nbits).astype(np.uint8)
    w = words_of(d)
    assert (bits_of(scramble(w, nbits, 0), nbits) == numpy_scramble(d)).all()
    t_np = _time(lambda: numpy_scramble(d), a.repeat)
    t_nb = _time(lambda: scramble(w, nbits, 0), a.repeat)

    gbps = lambda t: line_bits / t / 1e9  # noqa: E731
    r = {
        "rate": a.rate, "pairs": P, "line_bits": line_bits, "frames": len(frames), "repeat": a.repeat,
        "tx_gbps": gbps(t_tx), "rx_gbps": gbps(t_rx), "tx_rx_gbps": gbps(t_tx + t_rx),
        "tx_rx_with_frame_decode_gbps": gbps(t_tx + t_rxf),
        "rx_fec_bypass_gbps": gbps(t_rxb),
        "baseline_fec_only_gbps": gbps(t_fec), "ratio_tx_rx_vs_fec_only": t_fec / (t_tx + t_rx),
        "pcs_share_of_time": 1 - t_fec / (t_tx + t_rx),
        "scrambler_numba_gbps": nbits / t_nb / 1e9, "baseline_numpy_scrambler_gbps": nbits / t_np / 1e9,
        "ratio_scrambler_numba_vs_numpy": t_np / t_nb,
        "target_gbps": 2.0,
    }
    if a.stages:
        r["stage_ms"] = stage_times(cfg, blocks, a.repeat)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"Clause 119 PCS {a.rate}, {P} codeword pairs ({line_bits / 1e6:.1f} Mbit of line), "
              f"{len(frames)} frames, median of {a.repeat} (single thread; shared machine)")
        print(f"  TX  (66b -> lanes, incl. RS encode)      {r['tx_gbps']:7.3f} Gb/s")
        print(f"  RX  (lanes -> 66b, incl. lock + decode)  {r['rx_gbps']:7.3f} Gb/s")
        print(f"  TX+RX                                    {r['tx_rx_gbps']:7.3f} Gb/s   (target >= 2)")
        print(f"  TX+RX incl. frame decode + FCS check     {r['tx_rx_with_frame_decode_gbps']:7.3f} Gb/s")
        print(f"  RX with FEC bypassed (no RS decode)      {r['rx_fec_bypass_gbps']:7.3f} Gb/s")
        print(f"  baseline: RS encode+decode alone         {r['baseline_fec_only_gbps']:7.3f} Gb/s   "
              f"ratio TX+RX / FEC-only time = {1 / r['ratio_tx_rx_vs_fec_only']:.2f}x")
        print(f"  scrambler: numba {r['scrambler_numba_gbps']:.2f} Gb/s vs plain numpy "
              f"{r['baseline_numpy_scrambler_gbps']:.3f} Gb/s  -> {r['ratio_scrambler_numba_vs_numpy']:.0f}x")
        if a.stages:
            print(f"  per stage, ms per call of {P} pairs (each alone; TX chained {1e3 * t_tx:.2f}, "
                  f"RX chained {1e3 * t_rx:.2f}):")
            for k, v in r["stage_ms"].items():
                print(f"    {k:38s} {v:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
