"""``phy802 pcs``: the Clause 119 PCS from the command line.

Examples::

    phy802 pcs tx --frames 1000 --seed 1 --out lanes.txt            # frames -> 16 PCS lanes
    phy802 pcs tx --frames 200 --am-spacing 80 --ser 1e-3 --skew 20 --shuffle --out bad.txt
    phy802 pcs rx lanes.txt --json                                   # lock, decode, per-lane counters
    phy802 pcs lanemap --rate 400G                                   # codeword position -> lane, slot
    phy802 pcs markers --rate 200G
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from phy802.cli._common import add_force, add_json, add_seed, count_arg, emit, int_arg, probability, uint_arg
from phy802.runtime.resources import check_budget

__all__ = ["add_arguments", "run"]

MAX_FRAMES = 10**9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    text = "encode random Ethernet frames into PCS lanes and write them to a file"
    p = sub.add_parser("tx", help=text, description=text)
    p.add_argument("--frames", type=count_arg(0, MAX_FRAMES), default=100,
                   help=f"number of random frames, 0..{MAX_FRAMES:.0e} (default 100)")
    p.add_argument("--min-len", type=int_arg(0, 16000), default=60,
                   help="shortest frame without FCS, octets, 0..16000 (default 60)")
    p.add_argument("--max-len", type=int_arg(0, 16000), default=1514,
                   help="longest frame without FCS, octets, >= --min-len (default 1514)")
    p.add_argument("--idle-blocks", type=int_arg(0, 10**6), default=1,
                   help="idle 66b blocks after each frame, 0..1e6 (default 1)")
    p.add_argument("--out", required=True, help="output lanes file (.txt, or .npz for binary); required")
    p.add_argument("--ser", type=probability(zero_ok=True, one_ok=True), default=0.0,
                   help="add random symbol errors with this probability per lane symbol, 0..1 (default 0)")
    p.add_argument("--skew", type=int_arg(0, 10**6), default=0,
                   help="delay each lane by a random 0..SKEW symbols, 10-bit symbols (default 0)")
    p.add_argument("--shuffle", action="store_true", help="write the lanes in a random order (default: in order)")
    _add_config(p)
    add_force(p, "a transmission larger than the free memory")
    add_seed(p)
    add_json(p)
    text = "receive a lanes file: lock, deskew, decode, frames; per-lane counters"
    q = sub.add_parser("rx", help=text, description=text)
    q.add_argument("lanes", help="lanes file written by 'phy802 pcs tx' (.txt or .npz)")
    q.add_argument("--decode-mode", choices=["correct", "detect", "bypass"], default="correct",
                   help="RS decoder: correct errors, only detect them, or bypass it (default correct)")
    q.add_argument("--error-marking", choices=["pair", "none"], default="pair",
                   help="mark the 66b blocks of pairs with an uncorrectable codeword as errors (default pair)")
    add_json(q)
    text = "codeword symbol position -> PCS lane and slot (119.2.4.7)"
    m = sub.add_parser("lanemap", help=text, description=text)
    m.add_argument("--rate", choices=["400G", "200G"], default="400G", help="line rate (default 400G)")
    add_json(m)
    text = "alignment marker table as 10-bit symbols (119.2.4.4)"
    a = sub.add_parser("markers", help=text, description=text)
    a.add_argument("--rate", choices=["400G", "200G"], default="400G", help="line rate (default 400G)")
    add_json(a)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", choices=["400G", "200G"], default="400G", help="line rate (default 400G)")
    p.add_argument("--am-spacing", type=int_arg(40, 1 << 24), default=None,
                   help="257b blocks between AM groups, a multiple of 40 (default 163840 at 400G, 81920 at 200G)")
    p.add_argument("--scrambler-seed", type=uint_arg((1 << 58) - 1), default=None,
                   help="58-bit scrambler state, decimal or 0x hex (default 0x24E6959D0FA5DBD)")
    p.add_argument("--prbs9-seed", type=uint_arg(0x1FF, lo=1), default=0x1FF,
                   help="AM pad PRBS9 seed, 9 bits, nonzero (default 0x1FF)")
    p.add_argument("--am-status", type=uint_arg(7), default=0, help="3 AM status bits, 0..7 (default 0)")


def _tx(args) -> int:
    from phy802._rng import as_generator
    from phy802.pcs import PcsConfig, PcsTransmitter, frames_to_blocks
    from phy802.pcs.lanesfile import write_lanes

    from phy802.runtime.output import check_output_file

    check_output_file(args.out)  # a device/FIFO/link or a file phy802 did not write: refused before any work
    if args.frames < 0 or not 0 <= args.min_len <= args.max_len:
        raise ValueError("--frames must be >= 0 and 0 <= --min-len <= --max-len")
    if not 0 <= args.ser <= 1 or args.skew < 0:
        raise ValueError("--ser must be in [0, 1] and --skew >= 0")
    # memory: the frames themselves, then ~66/64*257/256*544/514 line bits per payload bit held as
    # 10-bit symbols in uint16 (2 B per 10 bits), a few working copies in TX and in the error step
    octets = args.frames * ((args.min_len + args.max_len) / 2 + 8 * args.idle_blocks + 32)
    symbols = octets * 8 * 1.12 / 10
    check_budget(f"pcs tx --frames {args.frames}", memory_bytes=octets * 2 + symbols * 2 * 8,
                 force=args.force, hint="use fewer --frames")
    kw = {} if args.scrambler_seed is None else {"scrambler_seed": args.scrambler_seed}
    cfg = PcsConfig(rate=args.rate, am_spacing=args.am_spacing, prbs9_seed=args.prbs9_seed,
                    am_status=args.am_status, **kw)
    rng = as_generator(args.seed)
    lens = rng.integers(args.min_len, args.max_len + 1, args.frames)
    frames = [rng.bytes(int(n)) for n in lens]
    res = PcsTransmitter(cfg).transmit(frames_to_blocks(frames, args.idle_blocks))
    lanes = res.lanes.copy()
    n_err = 0
    if args.ser > 0:
        hit = rng.random(lanes.shape) < args.ser
        n_err = int(hit.sum())
        lanes[hit] ^= rng.integers(1, 1024, n_err).astype(np.uint16)
    order = rng.permutation(cfg.n_lanes) if args.shuffle else np.arange(cfg.n_lanes)
    skew = rng.integers(0, args.skew + 1, cfg.n_lanes) if args.skew else np.zeros(cfg.n_lanes, np.int64)
    out = np.zeros((cfg.n_lanes, lanes.shape[1] + int(skew.max())), np.uint16)
    for r in range(cfg.n_lanes):
        out[r, : skew[r]] = rng.integers(0, 1024, skew[r])
        out[r, skew[r]: skew[r] + lanes.shape[1]] = lanes[order[r]]
    write_lanes(args.out, out, cfg, comment=f"phy802 pcs tx --frames {args.frames} --seed {args.seed}: "
                f"{res.n_pairs} codeword pairs, {n_err} symbol errors injected; row r carries lane "
                f"{order.tolist()}[r], delayed by {skew.tolist()}[r] symbols")
    info = {"file": args.out, "rate": cfg.rate, "am_spacing": cfg.spacing, "frames": args.frames,
            "blocks66": res.n_input_blocks, "pad_blocks": res.n_pad_blocks, "pairs": res.n_pairs,
            "symbols_per_lane": int(out.shape[1]), "symbol_errors_injected": n_err,
            "lane_of_row": order.tolist(), "skew_symbols": skew.tolist()}
    emit(args, info, lambda: (f"wrote {args.out}: {cfg.rate}, {cfg.n_lanes} lanes x {out.shape[1]} symbols, "
                              f"{res.n_pairs} codeword pairs, {args.frames} frames, "
                              f"{n_err} symbol errors injected"))
    return 0


def _rx(args) -> int:
    from phy802.pcs import PcsConfig, PcsReceiver
    from phy802.pcs.lanesfile import read_lanes

    import stat

    st = os.stat(args.lanes)
    if not stat.S_ISREG(st.st_mode):  # /dev/zero, a FIFO: refused, not read until memory runs out
        raise ValueError(f"{args.lanes}: is not a regular file (a device, FIFO or folder); expected a lanes file")
    lanes, fields = read_lanes(args.lanes)
    cfg = PcsConfig(decode_mode=args.decode_mode, error_marking=args.error_marking, **fields)
    rx = PcsReceiver(cfg)(lanes)
    c = rx.counters
    d = c.as_dict()

    def text() -> str:
        rows = [f"{cfg.rate} PCS, decode={cfg.decode_mode}: {c.pairs} codeword pairs, {c.blocks_66} 66b blocks",
                f"  codewords {c.codewords}: corrected {c.corrected_codewords}, uncorrected "
                f"{c.uncorrected_codewords}, corrected symbols {c.corrected_symbols}, marked pairs {c.marked_pairs}",
                f"  frames delivered {c.frames_delivered}, FCS errors {c.fcs_errors}, preamble/SFD errors {c.preamble_errors}, "
                f"aborted {c.frames_aborted}, "
                f"truncated {c.frames_truncated}; 66b block errors {c.block_errors}; invalid 257b {c.invalid_257}",
                f"  AM groups {c.am_groups} (marker errors after FEC {c.am_marker_errors}, status {c.am_status})",
                f"  {'lane':>4} {'row':>4} {'skew':>6} {'symbol errors':>14}"]
        row_of = {int(l): r for r, l in enumerate(c.lane_of_input)}
        for L in range(c.n_lanes):
            r = row_of[L]
            rows.append(f"  {L:>4} {r:>4} {int(c.skew[r]):>6} {int(c.symbol_errors[L]):>14}")
        return "\n".join(rows)

    emit(args, d, text)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "tx":
        return _tx(args)
    if args.action == "rx":
        return _rx(args)
    if args.action == "lanemap":
        from phy802.pcs import lane_of_symbol

        la, lb, sa, sb = lane_of_symbol(args.rate)
        obj = {"rate": args.rate, "laneA": la, "laneB": lb, "slotA": sa, "slotB": sb}
        emit(args, obj, lambda: "\n".join(["pos laneA slotA laneB slotB"] + [
            f"{t:>3} {la[t]:>5} {sa[t]:>5} {lb[t]:>5} {sb[t]:>5}" for t in range(544)]))
        return 0
    if args.action == "markers":
        from phy802.pcs import PcsConfig
        from phy802.pcs.alignment import am_symbols

        cfg = PcsConfig(rate=args.rate)
        syms = am_symbols(cfg.markers)
        obj = {"rate": args.rate, "octets": [r.hex().upper() for r in cfg.markers], "symbols": syms}
        emit(args, obj, lambda: "\n".join(f"lane {L:>2}: {cfg.markers[L].hex().upper()}  "
                                          + " ".join(f"{v:>4}" for v in syms[L]) for L in range(cfg.n_lanes)))
        return 0
    raise ValueError(f"unknown action {args.action!r}")  # pragma: no cover
