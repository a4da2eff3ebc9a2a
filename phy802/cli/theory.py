"""``phy802 theory``: closed-form PAM4 / RS error-rate tables.

Examples::

    phy802 theory pam4 --snr-db 14,16,18          # SER/BER vs SNR (SNR = Es / sigma^2)
    phy802 theory pam4 --ber 1e-3,2.4e-4          # the SNR for a target pre-FEC BER
    phy802 theory rs --ber 1e-4,2.4e-4 --code rs272  # FER and post-FEC BER, independent errors
    phy802 theory burst --pe 1e-4 --pb 0.5 --precoded
    phy802 theory rare --ber 2.4e-4 --json         # conditional Monte-Carlo vs the binomial
    phy802 theory inner --snr-db 15,16 --decoder hard,chase   # 800G/1.6T: Clause 177 + KP4
"""

from __future__ import annotations

import argparse

from phy802.cli._common import MAX_SEED, add_force, add_json, count_arg, emit, float_arg, int_arg, list_arg, probability
from phy802.runtime.resources import check_budget
from phy802.cli._vocab import rs_code_name
from phy802.cli import _inner_cli

_CODE_HELP = ("RS code: kp4 = RS(544,514) t=15, kr4 = RS(528,514) t=7, rs272 = low-latency RS(272,257+1) t=7 "
              "(default kp4)")

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser("pam4", help="PAM4 SER/BER on AWGN (SNR = average symbol energy / noise variance)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--snr-db", type=list_arg(float_arg(-20.0, 80.0)), metavar="DB[,DB...]",
                   help="SNR values in dB, comma list (no default)")
    g.add_argument("--ber", type=list_arg(probability(hi=0.375)), metavar="BER[,BER...]",
                   help="target pre-FEC BERs of PAM4 AWGN, each in (0, 0.375) (0.375 = PAM4 Gray at zero SNR), comma list; the SNR is solved for (no default)")
    add_json(p)

    r = sub.add_parser("rs", help="RS codeword error ratio and post-FEC BER for independent bit errors")
    r.add_argument("--ber", type=list_arg(probability(hi=0.5)), required=True, metavar="BER[,BER...]",
                   help="pre-FEC BERs of independent bit errors, each in (0, 0.5) (0.5 = a coin flip per bit), comma list; required")
    r.add_argument("--code", type=rs_code_name, default="kp4", help=_CODE_HELP)
    add_json(r)

    b = sub.add_parser("burst", help="exact FER of the 1-tap DFE burst model (Markov DP)")
    b.add_argument("--pe", type=list_arg(probability(one_ok=True)), required=True, metavar="PE[,PE...]",
                   help="G->B probabilities per PAM4 symbol, in (0, 1], comma list; required")
    b.add_argument("--pb", type=probability(zero_ok=True), default=0.5,
                   help="error propagation probability B->B, in [0, 1) (default 0.5)")
    b.add_argument("--precoded", action="store_true", help="count errors after the 1/(1+D) decoder (default off)")
    b.add_argument("--random-signs", action="store_true", help="random (not alternating) error signs (default off)")
    b.add_argument("--code", type=rs_code_name, default="kp4", help=_CODE_HELP)
    add_json(b)

    q = sub.add_parser("rare", help="rare-event (conditional Monte-Carlo) FER estimate")
    q.add_argument("--ber", type=probability(hi=0.25), default=2.4e-4,
                   help="pre-FEC BER of independent bit errors, in (0, 0.25) (the rare-event estimator's range; default 2.4e-4, the KP4 design point)")
    q.add_argument("--dfe-pb", type=probability(zero_ok=True), default=None,
                   help="use the DFE burst model on PAM4 symbols with this pb in [0, 1) (SER = 2 * BER; default: iid)")
    q.add_argument("--precoded", action="store_true", help="count errors after the 1/(1+D) decoder; needs --dfe-pb")
    q.add_argument("--samples-per-k", type=count_arg(1, 10**15), default=2000,
                   help="Monte-Carlo samples per number of symbol errors k (default 2000)")
    q.add_argument("--code", type=rs_code_name, default="kp4", help=_CODE_HELP)
    q.add_argument("--seed", type=int_arg(0, MAX_SEED), default=1, help="random seed, an integer >= 0 (default 1)")
    add_force(q, "runs estimated to take over an hour")
    add_json(q)
    _inner_cli.add_theory_parser(sub)


def _code(name):
    from phy802 import theory as th

    return th.rs_code(name)


def _table(header: list[str], rows: list[list]) -> str:
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.action == "inner":
        return _inner_cli.run_theory(args)
    from phy802 import theory as th

    if args.action == "pam4":
        snrs = args.snr_db if args.snr_db is not None else [th.snr_db_for_ber(b) for b in args.ber]
        rows = [{"snr_db": s, "sigma": float(th.sigma_from_snr_db(s)), "ser": float(th.pam4_ser(s)),
                 "ber": float(th.pam4_ber(s))} for s in snrs]
        text = "SNR = E[a^2]/sigma^2, levels -3,-1,1,3, Gray coded\n" + _table(
            ["snr_db", "sigma", "ser", "ber"], [[r["snr_db"], r["sigma"], r["ser"], r["ber"]] for r in rows])
        emit(args, {"rows": rows}, text)
        return 0
    code = _code(args.code)
    if args.action == "rs":
        rows = []
        for b in args.ber:
            if not 0 < b < 0.5:
                raise ValueError(f"--ber must be in (0, 0.5), got {b}")
            ps = float(th.symbol_error_prob(b, code.m))
            rows.append({"pre_fec_ber": b, "snr_db": th.snr_db_for_ber(b), "symbol_error_prob": ps,
                         "fer": float(th.rs_codeword_error_ratio(ps, code)), "post_fec_ber": float(th.post_fec_ber(b, code))})
        text = f"RS({code.n},{code.k}) t={code.t}, independent bit errors\n" + _table(
            ["pre_fec_ber", "snr_db", "p_sym", "fer", "post_fec_ber"],
            [[r["pre_fec_ber"], r["snr_db"], r["symbol_error_prob"], r["fer"], r["post_fec_ber"]] for r in rows])
        emit(args, {"code": code.name, "rows": rows}, text)
        return 0
    if args.action == "burst":
        if not 0 <= args.pb < 1:
            raise ValueError(f"--pb must be in [0, 1), got {args.pb}")
        rows = []
        for pe in args.pe:
            if not 0 < pe <= 1:
                raise ValueError(f"--pe must be in (0, 1], got {pe}")
            chain = th.ErrorChain.dfe(pe, args.pb, alternate=not args.random_signs)
            ser = chain.error_rate
            fer = th.markov_codeword_error_ratio(chain, code, 5, precoded=args.precoded)
            iid = float(th.rs_codeword_error_ratio(float(th.symbol_error_prob(ser, 5)), code))
            rows.append({"pe": pe, "pb": args.pb, "pam4_ser": ser, "fer": fer, "fer_iid_same_ser": iid})
        text = (f"1-tap DFE model, RS({code.n},{code.k}), 5 PAM4 symbols per RS symbol"
                f"{', after the 1/(1+D) decoder' if args.precoded else ''}\n") + _table(
            ["pe", "pb", "pam4_ser", "fer", "fer_iid"], [[r["pe"], r["pb"], r["pam4_ser"], r["fer"],
                                                         r["fer_iid_same_ser"]] for r in rows])
        emit(args, {"code": code.name, "precoded": args.precoded, "rows": rows}, text)
        return 0
    # rare: ~1e-4 s per sample per k (iid), ~5e-4 s with the DFE chain, one core
    check_budget(f"theory rare --samples-per-k {args.samples_per_k}", force=args.force,
                 seconds=args.samples_per_k * (1e-4 if args.dfe_pb is None else 5e-4),
                 hint="use fewer --samples-per-k (the default 2000 gives a few % relative error)")
    if not 0 < args.ber < 0.25:
        raise ValueError(f"--ber must be in (0, 0.25), got {args.ber}")
    if args.dfe_pb is None:
        chain, units = th.ErrorChain.iid(args.ber), code.m
        exact = float(th.rs_codeword_error_ratio(float(th.symbol_error_prob(args.ber, code.m)), code))
        if args.precoded:
            raise ValueError("--precoded needs --dfe-pb (PAM4-symbol units)")
    else:
        pb = args.dfe_pb
        ser = 2 * args.ber
        chain, units = th.ErrorChain.dfe(ser * (1 - pb) / (1 - ser), pb), 5
        exact = th.markov_codeword_error_ratio(chain, code, 5, precoded=args.precoded)
    res = th.rare_event_fer(chain, code, units_per_symbol=units, precoded=args.precoded,
                            samples_per_k=args.samples_per_k, seed=args.seed)
    obj = {"model": chain.name, "code": code.name, "estimate": res.as_dict(), "exact": exact,
           "ratio": res.fer / exact if exact > 0 else None}
    text = (f"{chain.name}, RS({code.n},{code.k}): rare-event FER {res.fer:.4g} +- {res.std_err:.2g} (1 s.e.), "
            f"exact {exact:.4g}, ratio {obj['ratio']:.4f}, {res.seconds:.2f} s"
            f"{'' if res.reliable else '  [UNRELIABLE: add samples or use the exact DP]'}")
    emit(args, obj, text)
    return 0
