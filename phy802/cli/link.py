"""``phy802 link``: run the composed link once and print per-lane counters like a PHY."""

from __future__ import annotations

import argparse
import sys

from phy802.cli._common import add_force, add_json, add_seed, count_arg, emit, float_arg, int_arg, probability, require_together
from phy802.runtime.resources import check_budget
from phy802.cli._hist import add_hist_arguments, hist_format, histogram_from_counts, print_histograms
from phy802.cli._vocab import add_code_fec
from phy802.cli import _inner_cli

__all__ = ["add_arguments", "run", "parse_lane_order"]

EXAMPLE = """examples:
  phy802 link --code kp4 --fec ieee --ber 2e-4 --pairs 2048 --seed 1
  phy802 link --fault-lane 3 --fault-ber 3e-3 --pairs 512      # one bad lane of 8 (kp4, ieee)
  phy802 link --rate 200G --fec detect_only --snr-db 16 --precoding --payload frames --json
  phy802 link --code kr4 --ber 1e-4      # RS(528,514) codeword-level model (not a Cl.119 code)
  phy802 link --code rs272 --fec llr --ber 1e-4   # low-latency RS(272,257+1), link-level retry
  phy802 link --rate 800G --code kp4 --inner c177 --snr-db 15 --codewords 3000   # 802.3dj inner + KP4
"""


def parse_lane_order(text: str | None):
    """``"0,1;2,3;..."`` -> ``((0, 1), (2, 3), ...)`` (groups per physical lane)."""
    if text is None:
        return None
    try:
        return tuple(tuple(int(x) for x in grp.split(",")) for grp in text.split(";") if grp.strip())
    except ValueError:
        raise ValueError(f"--lane-order: expected groups like '0,1;2,3;...', got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EXAMPLE
    p.add_argument("--rate", default="400G", choices=("400G", "200G", "800G", "1.6T"),
                   help="400G (default) or 200G; 800G / 1.6T: 4 / 8 x 200G lanes with the Clause 177 inner code "
                        "(codeword-level model, phy802.link.concat)")
    add_code_fec(p)
    _inner_cli.add_link_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ber", type=probability(hi=0.375), default=None,
                   help="pre-FEC BER of PAM4 AWGN on every lane, in (0, 0.375) (0.375 = PAM4 Gray at zero SNR; default: no noise)")
    g.add_argument("--snr-db", type=float_arg(-20.0, 80.0), default=None,
                   help="PAM4 AWGN on every lane at this SNR in dB, Es/sigma^2 (default: no noise)")
    p.add_argument("--fault-lane", type=int_arg(0, 63), default=None,
                   help="physical lane (index) with its own, worse channel (default: none)")
    p.add_argument("--fault-ber", type=probability(hi=0.375), default=None,
                   help="pre-FEC BER of PAM4 AWGN on --fault-lane, in (0, 0.375) (0.375 = PAM4 Gray at zero SNR); needs --fault-lane (default 1e-3)")
    p.add_argument("--lanes", type=int_arg(1, 64), default=None, help="physical lanes (default 8 at 400G, 4 at 200G)")
    p.add_argument("--lane-order", default=None,
                   help="bit-mux order, PCS lanes per physical lane: '0,1;2,3;...' (default consecutive groups)")
    p.add_argument("--precoding", action="store_true", help="1/(1+D) mod 4 precoder (default off)")
    p.add_argument("--precoder-init", type=int_arg(0, 3), default=None,
                   help="precoder initial state 0..3, needs --precoding (default 0)")
    p.add_argument("--level", choices=("pcs", "codeword"), default=None,
                   help="pcs or codeword (default pcs; codeword for kr4)")
    p.add_argument("--payload", choices=("data", "frames"), default="frames", help="frames (default) or data blocks")
    p.add_argument("--pairs", type=count_arg(1, 10**13), default=512,
                   help="codeword pairs to send, e.g. 2048 or 1e6 (default 512)")
    p.add_argument("--batch", type=int_arg(1, 1 << 16), default=256,
                   help="pairs per independent batch (one AM group each; default 256)")
    add_force(p, "runs estimated to take over an hour or more memory than is free")
    add_seed(p)
    add_json(p)
    add_hist_arguments(p)


def _channels(args, n_lanes: int):
    from phy802.channel import Noiseless, Pam4Awgn

    if args.ber is not None:
        good = Pam4Awgn.from_ber(args.ber)
    elif args.snr_db is not None:
        good = Pam4Awgn(args.snr_db)
    else:
        good = Noiseless()
    chans = [good] * n_lanes
    if args.fault_lane is not None:
        if not 0 <= args.fault_lane < n_lanes:
            raise ValueError(f"--fault-lane must be in 0..{n_lanes - 1}, got {args.fault_lane}")
        chans[args.fault_lane] = Pam4Awgn.from_ber(1e-3 if args.fault_ber is None else args.fault_ber)
    return chans


def _check_args(args) -> None:
    """Meaningless combinations and work too big for the machine."""
    require_together("--fault-ber", "--fault-lane", args.fault_ber is not None, args.fault_lane is not None)
    require_together("--precoder-init", "--precoding", args.precoder_init is not None, args.precoding)
    from phy802 import theory

    ber = args.ber if args.ber is not None else (float(theory.pam4_ber(args.snr_db)) if args.snr_db is not None else 0.0)
    ber = max(ber, args.fault_ber or (1e-3 if args.fault_lane is not None else 0.0))
    bits = args.pairs * 2 * 544 * 10  # line bits (kp4 pairs; the other codes are shorter)
    # every payload error offset is kept (int64) plus per-batch working buffers
    check_budget(f"link --pairs {args.pairs}", memory_bytes=bits * ber * 8 * 1.5 + min(args.pairs, args.batch) * 2e5,
                 force=args.force, hint="use fewer --pairs")


def _check_time(args, link) -> None:
    """Refuse a run estimated (from a short measured run of this link on this machine; a fixed
    constant of 1 Gb/s was ~4x optimistic) to take over an hour."""
    from phy802.runtime.resources import calibrated_seconds

    if args.force:
        return
    pairs_per_s_bound = 1e9 / (2 * 544 * 10)  # faster than the bit-exact link ever runs
    secs = calibrated_seconds(args.pairs, lambda n: link.run(n, args.seed, batch_pairs=min(args.batch, n)), 256,
                              assumed_rate=pairs_per_s_bound)
    check_budget(f"link --pairs {args.pairs}", seconds=secs, force=args.force,
                 hint=f"use fewer --pairs (measured here: ~{args.pairs / secs:.3g} pairs/s)")


def run(args: argparse.Namespace) -> int:
    from phy802.link import Link, LinkConfig

    if _inner_cli.check_inner(args):
        return _inner_cli.run_link(args)
    if args.inner == "none" or args.codewords is not None:
        raise ValueError(f"--inner/--codewords apply to the 800G/1.6T model only (--rate {args.rate})")
    _check_args(args)
    hfmt = hist_format(args)
    cfg = LinkConfig(rate=args.rate, code=args.code, fec=args.fec, precoding=args.precoding,
                     precoder_init=args.precoder_init or 0,
                     n_lanes=args.lanes, lane_order=parse_lane_order(args.lane_order), level=args.level,
                     payload=args.payload)
    link = Link(cfg, _channels(args, int(cfg.n_lanes)))
    _check_time(args, link)
    res = link.run(args.pairs, args.seed, batch_pairs=args.batch)
    c = res.counters
    rates = c.rates()
    batches = -(-args.pairs // args.batch)
    lock = {"batches": batches, "failed_batches": int(c.lock_failures), "locked": c.lock_failures < batches}
    out = {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "seed": args.seed,
           "counters": c.as_dict(), "rates": {k: v.as_dict() for k, v in rates.items()}, "lane_lock": lock,
           "payload_errors": res.payload_errors[:1000].tolist(), "payload_errors_total": int(res.payload_errors.size)}
    if not lock["locked"]:
        # nothing was received: no counter or rate means anything; say so instead of printing zeros/NaN
        msg = (f"NO LOCK: the receiver could not lock the PCS lanes (alignment markers) in any of the {batches} "
               f"batches, so nothing was received or counted; the channel is too noisy for the link to come up "
               f"(try a lower --ber / higher --snr-db)")
        emit(args, out, msg)
        print(f"phy802 link: lane lock failed in all {batches} batches (nothing received)", file=sys.stderr)
        return 1
    fh = histogram_from_counts(c.hist, (c.n - c.k) // 2, args.bins, "phy802 link")
    if hfmt:
        print_histograms(hfmt, [("phy802-link", fh, {})])
        return 0
    out["fec_histogram"] = fh.as_dict()

    def text() -> str:
        lines = [f"{cfg.rate} code={cfg.code} fec={cfg.fec} level={cfg.level} lanes={cfg.n_lanes} precoding={cfg.precoding} "
                 f"pairs={c.pairs} codewords={c.codewords} line bits={c.line_bits} ({c.seconds:.2f} s)", "",
                 "physical lane   PAM4 symbol errors   bit errors   BER"]
        per = c.line_bits // c.n_phys
        for i in range(c.n_phys):
            lines.append(f"  {i:>3}           {c.lane_symbol_errors[i]:>18}   {c.lane_bit_errors[i]:>10}   "
                         f"{c.lane_bit_errors[i] / per:.2e}")
        lines += ["", "PCS lane   symbol errors (corrected, PHY counter)   true symbol errors   bit errors"]
        for L in range(c.n_pcsl):
            lines.append(f"  {L:>3}      {c.pcs_lane_corrected[L]:>38}   {c.pcs_lane_symbol_errors[L]:>18}   "
                         f"{c.pcs_lane_bit_errors[L]:>10}")
        lines += ["", f"FEC: corrected codewords {c.corrected_codewords}, uncorrected {c.uncorrected_codewords}, "
                  f"corrected symbols {c.corrected_symbols}, miscorrected {c.miscorrected_codewords}",
                  f"codeword errors (message wrong) {c.codeword_errors}, of which not flagged {c.undetected_codeword_errors}"]
        if cfg.fec == "llr":
            lines.append(f"LLR: link-level retries {c.llr_retries}")
        if cfg.level == "pcs":
            lines.append(f"MAC: frames sent {c.frames}, FCS ok {c.frames_ok}, FCS errors {c.fcs_errors}, "
                         f"marked 66b blocks {c.marked_blocks}, error blocks {c.block_errors}, "
                         f"payload bit errors {c.payload_bit_errors} of {c.payload_bits}")
        if c.lock_failures:
            lines.append(f"LANE LOCK: {c.lock_failures} of {batches} batches dropped (no lane lock); the counts "
                         f"above cover only the {batches - c.lock_failures} batches that locked")
        lines += ["", f"FEC codeword histogram (pre-FEC symbol errors per codeword; t = {fh.t}):", fh.format_text(), ""]
        notes = {"post_fec_ber": "  decoder output", "payload_ber": "  after the descrambler (README: two post-FEC BERs)"}
        for k, v in rates.items():
            lines.append(f"{k:<13} {v.value:.3e}  95% CI [{v.lo:.3e}, {v.hi:.3e}]  ({v.events}/{v.trials})"
                         + notes.get(k, ""))
        return "\n".join(lines)

    emit(args, out, text)
    return 0
