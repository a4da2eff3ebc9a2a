"""``phy802 collective``: time of one collective on a GPU cluster, per FEC mode; nccl-tests checks.

The model (:mod:`protocol.cluster.nccl`, sources in its docstring): the cluster as it is built
(nodes, NVLink inside, NICs and fabric between; :mod:`protocol.cluster.topology`), NCCL's cost
table as data (``protocol/cluster/nccl_tuning.json``, NCCL 2.30), the (algorithm, protocol) NCCL
would pick per size, and the FEC receive latency of every link an inter-node hop crosses.
At a BER > 0 the time shown is the time at that BER: loss recovery simulated over ``--trials``
seeded trials (:mod:`protocol.cluster.transport`; 1000 by default), their mean, quantiles and
failure rate, with the no-loss time beside it under its own name.  ``--nccl-tests FILE`` compares the model with a measured run, per size;
``--calibrate OUT`` fits the effective inter-node bandwidth and a latency offset to it,
``--calibration FILE`` applies such a fit.  ``--cluster flat-ethernet`` is the earlier flat
alpha-beta model (:mod:`protocol.cluster.flat`) with its own flags (``--ranks``, ``--nic-ns``, ...).
"""

from __future__ import annotations

import argparse
import math

from phy802.cli._common import CliError, add_json, add_seed, count_arg, emit, float_arg, int_arg, list_arg

__all__ = ["add_arguments", "run", "add_cluster_arguments", "cluster_from_args", "spec_from_args", "is_flat"]

_NEW_FLAGS = ("burst_pb", "spine_code", "spine_fec", "spine_ber", "nodes", "gpus_per_node", "nics_per_node", "scale_up", "gpu", "radix", "oversubscription", "transport",
              "cpu", "channels", "nvls", "collnet", "net_efficiency", "latency_offset_us", "timeout", "retry_cnt")
_FLAT_FLAGS = ("step_ns", "link_gbps", "path_links", "ranks_per_leaf", "ranks_per_pod", "header_fallback")


def add_cluster_arguments(p: argparse.ArgumentParser, *, code: bool = True) -> None:
    """Cluster flags shared by ``collective`` and ``tradeoff``."""
    from phy802.cli._vocab import CODE_HELP, _Given, code_list
    from protocol.cluster.topology import GPUS, PRESET_NAMES, RATES_GBPS, SCALE_UP, TOPOLOGIES, TRANSPORTS
    from protocol.framing import CODES
    from protocol.modes import MODE_NAMES

    g = p.add_argument_group("cluster (protocol/cluster/topology.py; a preset, then any part overridden)")
    g.add_argument("--cluster", choices=PRESET_NAMES, default="dgx-h100-ib",
                   help="preset: dgx-h100-ib (8 x H100 NVLink 4, 8 x 400G IB, rail-optimized), hgx-b200-roce, "
                        "hgx-a100-roce, flat-ethernet (the earlier flat model: one 400G link per rank, every step "
                        "over the network) (default dgx-h100-ib)")
    g.add_argument("--nodes", type=int_arg(1, 10**6), default=None, help="nodes (default: the preset's, 2)")
    g.add_argument("--gpus-per-node", type=int_arg(1, 1024), default=None, help="GPUs per node (default 8)")
    g.add_argument("--nics-per-node", type=int_arg(0, 1024), default=None,
                   help="NICs per node (default 8: one per GPU, rail-optimized)")
    g.add_argument("--rate", choices=tuple(RATES_GBPS), default=None,
                   help="NIC / link rate (default: the preset's; flat-ethernet: 400G or 200G only)")
    g.add_argument("--scale-up", choices=tuple(SCALE_UP), default=None,
                   help="scale-up domain inside a node (default: the preset's)")
    g.add_argument("--gpu", choices=GPUS, default=None, help="GPU generation (NCCL's per-generation constants) (default: the preset's, hopper)")
    g.add_argument("--topology", choices=TOPOLOGIES, default=None,
                   help="fabric: single-switch, rail-optimized (two-tier rails), leaf-spine, three-tier "
                        "(flat-ethernet: single-switch, leaf-spine, three-tier) (default: the preset's; flat-ethernet "
                        "single-switch)")
    g.add_argument("--radix", type=int_arg(2, 10**6), default=None, help="switch ports (default: the preset's)")
    g.add_argument("--oversubscription", type=float_arg(None, 1e6), default=None,
                   help="leaf down:up port ratio, >= 1 (default 1: non-blocking)")
    g.add_argument("--transport", choices=TRANSPORTS, default=None,
                   help="loss recovery: ib / roce (go-back-N, RC queue pairs), selective (selective repeat); "
                        "the llr mode adds link-level retry below it (default: the preset's, ib for dgx-h100-ib)")
    g.add_argument("--cpu", choices=("intel", "amd"), default=None, help="host CPU (NCCL's LL caps; default intel)")
    g.add_argument("--channels", type=int_arg(1, 64), default=None, help="NCCL channels (default 2 per NIC, <= 32)")
    g.add_argument("--nvls", action=argparse.BooleanOptionalAction, default=None,
                   help="NVLink SHARP available (default: on NVLink 4/5 Hopper/Blackwell)")
    g.add_argument("--collnet", action="store_true", default=None, help="in-network reduction (SHARP) available")
    g.add_argument("--net-efficiency", type=float_arg(0, 2, lo_open=True), default=None,
                   help="share of the NIC rate a collective gets (default 0.94; 'phy802 collective --nccl-tests FILE --calibrate OUT' fits it)")
    g.add_argument("--latency-offset-us", type=float_arg(-1e6, 1e6), default=None,
                   help="added to every collective, us (default 0; 'phy802 collective --nccl-tests FILE --calibrate OUT' fits it)")
    g.add_argument("--calibration", default=None, metavar="FILE",
                   help="apply a 'phy802 collective --calibrate' output (net efficiency, latency offset and any per-algorithm "
                        "constants and bandwidth ceiling it holds) (default: none)")
    g.add_argument("--nccl-table", default=None, metavar="FILE",
                   help="JSON overriding values of NCCL's cost table (keys of protocol/cluster/nccl_tuning.json) "
                        "(default: none, the built-in NCCL 2.30 table)")
    g.add_argument("--timeout", type=int_arg(0, 31), default=None,
                   help="NCCL_IB_TIMEOUT: RTO = 4.096 us x 2^timeout (default 20)")
    g.add_argument("--retry-cnt", type=int_arg(0, 7), default=None, help="NCCL_IB_RETRY_CNT (default 7)")
    if code:
        g.add_argument("--code", type=code_list, default=("kp4",), metavar="CODE[,CODE...]", action=_Given,
                       help=f"{CODE_HELP}; on every link, comma list (default kp4)")
    g.add_argument("--spine-code", choices=tuple(CODES), default=None,
                   help="code of the switch-switch links (default: the NIC links' code)")
    g.add_argument("--spine-fec", choices=MODE_NAMES, default=None,
                   help="receive mode of the switch-switch links (default: the NIC links' mode)")
    g.add_argument("--spine-ber", type=float_arg(0.0, 0.5, hi_open=True), default=None,
                   help="pre-FEC BER of the switch-switch links (default: the NIC links' BER)")
    g.add_argument("--burst-pb", type=float_arg(0.0, 1.0, hi_open=True), default=None,
                   help="burst errors: 1-tap DFE error propagation with this burst continuation probability per "
                        "PAM4 symbol (phy802.theory ErrorChain.dfe; default: independent errors)")
    g.add_argument("--switch-ns", type=float_arg(0, 1e9), default=None,
                   help="latency of one switch, ns (default: the preset's; flat-ethernet 500)")
    g.add_argument("--nic-ns", type=float_arg(0, 1e9), default=None,
                   help="latency of one NIC traversal, ns (default 500)")
    g.add_argument("--fiber-m", type=float_arg(0, 1e7), default=None,
                   help="fibre length of each link, metres, 5 ns/m (default 10)")
    f = p.add_argument_group("flat-ethernet only (protocol/cluster/flat.py)")
    f.add_argument("--step-ns", type=float_arg(0, 1e12), default=None,
                   help="fixed software cost per collective step, ns (default 0)")
    f.add_argument("--link-gbps", type=float_arg(0, 1e6, lo_open=True), default=None,
                   help="payload (MAC) rate of a link in Gb/s (default: 400 at 400G, 200 at 200G)")
    f.add_argument("--path-links", type=int_arg(1, 64), default=None,
                   help="override the PHY traversals per path (default: from --topology and the number of ranks)")
    f.add_argument("--ranks-per-leaf", type=int_arg(1, 10**7), default=None,
                   help="ranks under one leaf switch (default 32)")
    f.add_argument("--ranks-per-pod", type=int_arg(1, 10**7), default=None,
                   help="ranks under one pod, three-tier (default 512)")
    f.add_argument("--header-fallback", action="store_true", default=None,
                   help="bypass/unequal frames whose header is hit wait for the corrected path instead of being "
                        "dropped and resent (SPEC D3 reading; default: dropped, as protocol.delivery)")


def is_flat(args: argparse.Namespace) -> bool:
    return getattr(args, "cluster", "dgx-h100-ib") == "flat-ethernet"


def _given(args: argparse.Namespace, names) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) is not None]


def cluster_from_args(args: argparse.Namespace, **over):
    """A :class:`protocol.cluster.flat.Cluster` (``--cluster flat-ethernet``) or a
    :class:`protocol.cluster.topology.ClusterSpec` from the shared flags; ``over`` sets the rest."""
    return _flat_from_args(args, **over) if is_flat(args) else spec_from_args(args, **over)


def _flat_from_args(args: argparse.Namespace, **over):
    from protocol.cluster.flat import TOPOLOGIES, Cluster

    bad = _given(args, _NEW_FLAGS) + (["--calibration"] if getattr(args, "calibration", None) else [])
    if bad:
        raise CliError(f"{', '.join(bad)}: not part of --cluster flat-ethernet (one link per rank); drop them or "
                       "choose another --cluster")
    rate = args.rate or "400G"
    if rate not in ("400G", "200G"):
        raise CliError(f"--rate {rate}: the flat-ethernet model knows 400G and 200G only")
    topo = args.topology or "single-switch"
    if topo not in TOPOLOGIES:
        raise CliError(f"--topology {topo}: the flat-ethernet model knows {', '.join(TOPOLOGIES)}")
    d = Cluster()
    kw = dict(rate=rate, topology=topo)
    for name in ("switch_ns", "nic_ns", "fiber_m", "step_ns", "link_gbps", "path_links", "ranks_per_leaf",
                 "ranks_per_pod", "header_fallback"):
        v = getattr(args, name, None)
        kw[name] = getattr(d, name) if v is None else v
    kw.update(over)
    return Cluster(**kw)


def spec_from_args(args: argparse.Namespace, **over):
    """The :class:`ClusterSpec` of ``--cluster`` with every given flag applied."""
    from protocol.cluster.ncclfile import check_hardware, read_calibration
    from protocol.cluster.topology import preset

    bad = _given(args, _FLAT_FLAGS)
    if bad:
        raise CliError(f"{', '.join(bad)}: only with --cluster flat-ethernet (the cluster model has its own path "
                       "per fabric)")
    kw = {n: getattr(args, n, None) for n in _NEW_FLAGS + ("rate", "topology", "switch_ns", "nic_ns", "fiber_m")}
    cal = None
    if getattr(args, "calibration", None):
        cal = read_calibration(args.calibration)
        for k, v in cal.items():
            if kw.get(k) is None and k != "hardware":
                kw[k] = v
    ranks = over.pop("ranks", None)
    kw.update({k: v for k, v in over.items()})
    spec = preset(args.cluster, **kw)
    if cal is not None:
        check_hardware(cal, spec, args.calibration)
    if ranks is not None and args.gpus_per_node is not None and ranks < args.gpus_per_node:
        raise CliError(f"--gpus-per-node {args.gpus_per_node} is more GPUs than --ranks {ranks}")
    if ranks is not None and ranks != spec.ranks:
        if args.nodes is not None:
            raise CliError(f"--ranks {ranks} disagrees with --nodes {args.nodes} x --gpus-per-node "
                           f"{spec.gpus_per_node} = {spec.ranks}")
        if ranks > spec.gpus_per_node and ranks % spec.gpus_per_node:
            raise CliError(f"--ranks {ranks} is not a whole number of nodes of --gpus-per-node {spec.gpus_per_node}")
        spec = spec.with_(ranks=ranks)
    if spec.latency_offset_us < 0 or any(v < 0 for _, v in spec.algo_latency_us):
        _check_offsets(spec, args)
    return spec


def _check_offsets(spec, args: argparse.Namespace) -> None:
    """A negative latency offset (given or calibrated) that takes any collective's fixed cost below 0,
    at the smallest size, with NCCL's own choice: refused before anything is modelled with it."""
    from protocol.cluster.nccl import OPS

    for op in OPS:
        try:
            _predict(args, op, 1, spec)
        except CliError:
            raise
        except ValueError:
            continue  # an op this cluster cannot run (the command using it says so)


def _table(args: argparse.Namespace):
    from protocol.cluster.nccl import load_table

    return load_table(getattr(args, "nccl_table", None))


def _nccl_list(kind: str):
    """argparse type: an NCCL_ALGO / NCCL_PROTO value, checked name by name (kept as given)."""

    def parse(text: str) -> str:
        from protocol.cluster.nccl import parse_nccl_list

        if kind == "algo" and text.strip().lower() == "direct":
            return "direct"  # the flat-ethernet model's; refused by the cluster model with its own message
        try:
            parse_nccl_list(text, kind)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from phy802.cli._vocab import FEC_HELP, _Given, fec_list
    from protocol.cluster.nccl import ALGOS, OPS, PROTOS

    p.add_argument("--op", default=None, choices=OPS,
                   help="collective (default allreduce; with --nccl-tests: the file's, this must agree)")
    p.add_argument("--algo", default=None, type=_nccl_list("algo"), metavar="ALGO[,ALGO...]",
                   help=f"the algorithms enabled, as NCCL_ALGO: one forces it, a comma list (ring,tree) or ^list "
                        f"(^nvls,nvls_tree: those disabled) leaves NCCL's minimum-time choice among them; "
                        f"{', '.join(ALGOS)} (default: all; flat-ethernet: ring, tree or direct)")
    p.add_argument("--proto", default=None, type=_nccl_list("proto"), metavar="PROTO[,PROTO...]",
                   help=f"the protocols enabled, as NCCL_PROTO (one, a comma list or ^list of {', '.join(PROTOS)}; "
                        "default: all the transport allows)")
    p.add_argument("--ranks", type=list_arg(int_arg(1, 10**7)), default=None,
                   help="ranks, comma list (default: nodes x GPUs of the cluster; flat-ethernet 64)")
    p.add_argument("--bytes", type=list_arg(count_arg(0, 10**15)), default=(25_000_000,), action=_Given,
                   help="message size in bytes (nccl-tests' size), comma list; 1e6 is fine (default 25e6)")
    p.add_argument("--fec", type=fec_list, default=("ieee",), metavar="MODE[,MODE...]", action=_Given,
                   help=f"{FEC_HELP}; comma list (default ieee; bypass on --code none, which decodes nothing)")
    p.add_argument("--ber", type=list_arg(float_arg(0.0, 0.5, hi_open=True)), action=_Given,
                   default=(0.0,), help="pre-FEC line BER of every link, each in [0, 0.5) (0 = error-free; 0.5 = a coin flip per bit), "
                        "comma list (default 0)")
    p.add_argument("--trials", type=int_arg(0, 10**9), default=None,
                   help="simulated loss recovery at BER > 0 over N seeded trials: the time is their mean, with "
                        f"p50, p99, p999 and the failure rate (default {DEFAULT_TRIALS} at BER > 0; at BER 0 "
                        "nothing is lost and the time is the model's one value)")
    p.add_argument("--nccl-tests", default=None, metavar="FILE",
                   help="an nccl-tests output (text, or CSV as in tests/data/nccl; '-' = stdin): measured vs predicted "
                        "per size (default: none)")
    p.add_argument("--calibrate", default=None, metavar="OUT",
                   help="with --nccl-tests: fit net efficiency and latency offset to the run (and, where the run "
                        "needs them, per-algorithm constants and a bus-bandwidth ceiling), write them to OUT "
                        "(default: no fit)")
    p.add_argument("--holdout", type=int_arg(2, 1000), default=None,
                   help="with --calibrate: fit on all sizes but every K-th, and report the held-out ratios "
                        "(default: fit on all)")
    p.add_argument("--force", action="store_true",
                   help=f"run a product of more than {MAX_ROWS:,} rows, or --trials beyond the memory / time estimate")
    add_cluster_arguments(p)
    add_seed(p)
    add_json(p)


def _fmt_us(v: float) -> str:
    return "inf" if not math.isfinite(v) else f"{v:.4g}"


#: rows of one ``collective`` product (ranks x bytes x codes x modes x BERs) run without ``--force``;
#: a query costs ~1-2 ms of CPU (spec, prediction, table row), so this is about a minute at most
MAX_ROWS = 20_000
#: simulated loss recovery one ``collective`` runs without ``--force`` (it prints nothing until the
#: table: a query, not a batch job; ``tradeoff`` and scripts run longer ones)
MAX_SIM_SECONDS = 600.0
#: trials per row at BER > 0 when ``--trials`` is not given: the time at the BER is a mean and
#: tails over simulated loss recovery, never the no-loss time
DEFAULT_TRIALS = 1000


def _combos(args: argparse.Namespace) -> list[tuple]:
    """Every (ranks, bytes, code, fec, ber) asked, refused up front past :data:`MAX_ROWS`."""
    ranks = args.ranks or (None,)
    n = len(ranks) * len(args.bytes) * len(args.code) * len(args.fec) * len(args.ber)
    if n > MAX_ROWS and not args.force:
        raise CliError(f"--ranks x --bytes x --code x --fec x --ber is {n:,} rows (about {n * 2e-3 / 60:.2g} min of "
                       f"modelling before any --trials; limit {MAX_ROWS:,}); ask for fewer values (--force to run "
                       "anyway)")
    return [(r, b, code, fec, ber) for r in ranks for b in args.bytes for code in args.code for fec in args.fec
            for ber in args.ber]


def _check_code_fec(args: argparse.Namespace) -> None:
    """``--code none`` has no FEC sublayer: every mode but bypass would be modelled as decoding what
    is not there (``trace generate`` refuses the same pair); a typed mode other than bypass with a
    code list holding ``none`` is refused, the default mode becomes bypass on ``none``."""
    if "none" in args.code and getattr(args, "_fec_given", False):
        bad = [f for f in args.fec if f != "bypass"]
        if bad:
            raise CliError(f"--code none --fec {bad[0]}: --code none has no FEC sublayer, nothing is decoded; "
                           "model --code none with --fec bypass only (in a run of its own)")


def _offset_source(args: argparse.Namespace) -> str:
    """The option or file a latency shift came from, as the user gave it."""
    if args.latency_offset_us is not None:
        return f"--latency-offset-us {args.latency_offset_us:g}"
    return f"--calibration {args.calibration}" if getattr(args, "calibration", None) else "the cost table"


def _predict(args: argparse.Namespace, op: str, size: int, c, **kw):
    """:func:`protocol.cluster.nccl.predict`, with a latency offset (``--latency-offset-us``, a
    calibration's ``latency_offset_us`` / ``algo_latency_us``) that makes a collective's fixed cost or
    time negative refused, naming where it came from, not printed."""
    from protocol.cluster.nccl import NegativeLatencyError, predict

    try:
        pr = predict(op, size, c, **kw)
    except NegativeLatencyError as exc:  # the model refuses it; say which option or file made it so
        raise CliError(f"{_offset_source(args)} makes the modelled fixed cost of {op} ({exc.algo}/{exc.proto}, "
                       f"{size} B, {c.ranks} ranks) negative ({exc.latency_us:.4g} us): a time cannot be below 0"
                       ) from exc
    if pr.latency_s < 0 or pr.time_s < 0:
        raise CliError(f"{_offset_source(args)} makes the modelled fixed cost of {pr.op} ({pr.algo}/{pr.proto}, "
                       f"{pr.bytes} B, {pr.ranks} ranks) negative ({pr.latency_s * 1e6:.4g} us): a time cannot be "
                       "below 0")
    return pr


def run(args: argparse.Namespace) -> int:
    if args.calibrate is not None and args.calibrate == "":
        raise CliError("--calibrate '': an empty path names no file")
    if args.nccl_tests is not None:
        if args.nccl_tests == "":
            raise CliError("--nccl-tests '': an empty path names no file")
        return _run_nccl_tests(args)
    if args.calibrate is not None or args.holdout:
        raise CliError("--calibrate / --holdout need --nccl-tests FILE")
    if is_flat(args):
        return _run_flat(args)
    _check_cluster_args(args)
    trials = DEFAULT_TRIALS if args.trials is None else args.trials
    rows, simulated = _cluster_rows(args, trials)
    first = rows[0][0]
    obj: dict = {"cluster": first.to_dict(), "rows": [_row_json(r) for _, r in rows]}
    if len(rows) == 1:
        obj = {**_row_json(rows[0][1]), **obj}
    emit(args, obj, lambda: _cluster_text(first, rows, simulated, trials, args.seed))
    return 0


def _check_cluster_args(args: argparse.Namespace) -> None:
    """Refuse options the cluster model cannot honour: the flat model's ``--algo direct``, a code/FEC
    pair that does not exist, ``--trials`` with nothing to simulate or none where loss must be simulated."""
    if args.algo == "direct":
        raise CliError("--algo direct is the flat-ethernet model's; the cluster model calls it p2p")
    _check_code_fec(args)
    if args.trials and not any(b > 0 for b in args.ber):
        raise CliError(f"--trials {args.trials} at BER 0: nothing is lost, there is nothing to simulate; give "
                       "--ber > 0 (or drop --trials)")
    if args.trials == 0 and any(b > 0 for b in args.ber):
        raise CliError(f"--trials 0 with --ber {max(args.ber):g}: the time at a BER > 0 is simulated loss "
                       f"recovery (mean and tails); give --trials N >= 1 (default {DEFAULT_TRIALS})")


def _cluster_rows(args: argparse.Namespace, trials: int) -> tuple[list[tuple], bool]:
    """``([(cluster spec, row)], simulated)``: NCCL's modelled time of each combination of the options,
    and at BER > 0 the loss recovery simulated over ``trials`` seeded trials (refused up front when too big)."""
    from dataclasses import asdict

    from phy802.runtime.interrupts import check_interrupt

    table = _table(args)
    op = args.op or "allreduce"
    built = []
    for n, size, code, fec, ber in _combos(args):
        check_interrupt()
        over = dict(code=code, fec="bypass" if code == "none" else fec, ber=ber)
        if n is not None:
            over["ranks"] = n
        c = spec_from_args(args, **over)
        pr = _predict(args, op, size, c, algo=args.algo, proto=args.proto, table=table)
        built.append((c, pr))
    sim = [c.ber > 0 for c, _ in built]
    if any(sim):
        _check_trials(args, [(c, pr) for (c, pr), s in zip(built, sim) if s], trials)
    rows = []
    for (c, pr), s in zip(built, sim):
        row = {k: v for k, v in asdict(pr).items() if k != "candidates"}
        row["time_us"] = pr.time_us
        row["no_loss_time_us"] = pr.time_us
        row["no_loss_busbw_GBps"] = pr.busbw_GBps
        row["candidates_us"] = {k: v for k, v in pr.candidates.items()}
        if s:
            row.update(_simulate(args, c, pr, trials))
        rows.append((c, row))
    return rows, any(sim)


def _cluster_text(first, rows: list[tuple], simulated: bool, trials: int, seed: int) -> str:
    """The table ``phy802 collective`` prints: one line per row, the columns of the simulation when
    any row was simulated, and what the times are (model values)."""
    out = [first.describe().rsplit(", links", 1)[0]]
    hdr = (f"{'op':<10} {'ranks':>6} {'bytes':>10} {'algo/proto':<17} {'code':<6} {'fec':<22} {'ber':>8} "
           f"{'time us':>10}")
    if simulated:
        hdr += f" {'p50 us':>10} {'p99 us':>10} {'p999 us':>10} {'fail':>8} {'no-loss us':>10}"
    hdr += f" {'busbw GB/s':>10} {'FEC hops':>8} {'phy us':>7}"
    out.append(hdr)
    for _, r in rows:
        t = r.get("time_us_dist")
        line = (f"{r['op']:<10} {r['ranks']:>6} {r['bytes']:>10.4g} {r['algo'] + '/' + r['proto']:<17} "
                f"{r['code']:<6} {r['fec']:<22} {r['ber']:>8.2g} "
                f"{_fmt_us(t['mean'] if t else r['time_us'])[:10]:>10}")
        if simulated:
            if t:
                line += (f" {_fmt_us(t['p50']):>10} {_fmt_us(t['p99']):>10} {_fmt_us(t['p999']):>10} "
                         f"{r['failure_rate']:>8.3g}")
            else:
                v = _fmt_us(r["time_us"])
                line += f" {v:>10} {v:>10} {v:>10} {0:>8.3g}"
            line += f" {_fmt_us(r['no_loss_time_us']):>10}"
        line += f" {_fmt_us(r['busbw_GBps']):>10} {r['fec_traversals']:>8} {r['phy_s'] * 1e6:>7.3g}"
        out.append(line)
    out.append("time: NCCL's cost model (protocol/cluster/nccl_tuning.json, NCCL 2.30) + each inter-node hop's "
               "links x (FEC latency - KP4's); FEC hops = link traversals on the critical path")
    if simulated:
        out.append(f"at BER > 0: time = mean over the {trials} seeded trials of loss recovery that completed "
                   f"(--trials, --seed {seed}), p50/p99/p999 their quantiles, fail the share of trials in "
                   "which a queue pair gave up; busbw at that mean; no-loss = the same collective with no frame "
                   "lost (model values, all)")
    if first.rate != rows[0][1]["phy_rate"]:
        out.append(f"note: protocol.latency has no {first.rate} model yet; FEC latency priced at "
                   f"{rows[0][1]['phy_rate']}")
    return "\n".join(out)


def _row_json(r: dict) -> dict:
    """A row as ``--json`` gives it: a simulated row's ``time_us`` is its distribution."""
    r = dict(r)
    if "time_us_dist" in r:
        r["time_us"] = r.pop("time_us_dist")
    return r


def _check_trials(args: argparse.Namespace, todo: list, trials: int) -> None:
    """Refuse up front, with the estimate, simulations that need more memory or time than allowed:
    all rows together, the lost frames timed on this machine (:func:`phy802.runtime.resources.calibrated_seconds`)."""
    from phy802.runtime.resources import calibrated_seconds, check_budget
    from protocol.cluster.transport import estimate, simulate

    ests = [estimate(pr, c, trials) for c, pr in todo]
    losses = sum(e["losses"] for e in ests)
    mem = max(e["memory_bytes"] for e in ests)
    base = sum(e["seconds"] for e in ests)
    c0, pr0 = max(todo, key=lambda t: estimate(t[1], t[0], 1)["losses"])
    per = max(estimate(pr0, c0, 1)["losses"], 1.0)

    def run_small(k: int) -> None:
        simulate(pr0, c0, max(1, int(k / per)), seed=0)

    secs = base if args.force else max(base, calibrated_seconds(losses, run_small, 1 << 20, assumed_rate=3e7,
                                                                 max_seconds=MAX_SIM_SECONDS))
    check_budget(f"--trials {trials}" + (f" x {len(todo)} rows" if len(todo) > 1 else ""), memory_bytes=mem,
                 seconds=secs, force=args.force, max_seconds=MAX_SIM_SECONDS,
                 hint=f"about {losses:.3g} lost frames expected; fewer --trials")


def _simulate(args: argparse.Namespace, c, pr, trials: int) -> dict:
    from protocol.cluster.transport import simulate

    res = simulate(pr, c, trials, seed=args.seed)
    from protocol.cluster.nccl import bus_factor

    mean = res.mean_us
    return {"time_us_dist": {"mean": mean, "p50": res.p50_us, "p99": res.p99_us, "p999": res.p999_us},
            "failure_rate": res.failure_rate, "trials": res.trials, "frame_loss": res.frame_loss,
            "expected_delay_us": mean - pr.time_us if math.isfinite(mean) else math.inf,
            "algbw_GBps": pr.bytes / (1000.0 * mean) if math.isfinite(mean) and mean > 0 else 0.0,
            "busbw_GBps": (pr.bytes / (1000.0 * mean) * bus_factor(pr.op, pr.ranks)
                           if math.isfinite(mean) and mean > 0 else 0.0),
            "sim_wall_s": res.seconds}  # wall clock: under --json's timing key


def _run_flat(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from protocol.cluster.flat import collective_time

    if args.trials:
        raise CliError("--trials needs the cluster model (the flat-ethernet model has expected resends only)")
    if args.proto:
        raise CliError("--proto is not part of the flat-ethernet model")
    if args.op == "alltoall":
        raise CliError("--op alltoall is not part of the flat-ethernet model")
    op = args.op or "allreduce"
    algo = args.algo
    if algo is not None and algo not in ("ring", "tree", "direct"):
        raise CliError(f"--algo {algo}: the flat-ethernet model knows ring, tree, direct")
    rows = []
    for n in args.ranks or (64,):
        for size in args.bytes:
            for code in args.code:
                for fec in args.fec:
                    for ber in args.ber:
                        c = _flat_from_args(args, ranks=n, code=code, fec=fec, ber=ber)
                        rows.append((c, collective_time(op, size, c, algo)))
    first = rows[0][0]

    def text() -> str:
        r0 = rows[0][1]
        out = [f"{r0.op} ({r0.algo}), {first.rate}, {first.topology} [flat-ethernet]; path: 2 NICs x {first.nic_ns:g} "
               f"ns, switch {first.switch_ns:g} ns, fibre {first.fiber_m:g} m per link",
               f"{'ranks':>6} {'bytes':>10} {'code':<6} {'fec':<22} {'ber':>8} {'time us':>11} {'bw us':>10} "
               f"{'lat us':>9} {'resend us':>10} {'fallbk us':>9} {'phy us':>8} {'links':>6} {'busbw Gb/s':>10}"]
        for c, r in rows:
            out.append(f"{r.ranks:>6} {r.bytes:>10.4g} {r.code:<6} {r.fec:<22} {r.ber:>8.2g} {r.time_s * 1e6:>11.3f} "
                       f"{r.bandwidth_s * 1e6:>10.3f} {r.latency_s * 1e6:>9.3f} {r.resend_s * 1e6:>10.3f} "
                       f"{r.fallback_s * 1e6:>9.3f} {r.phy_s * 1e6:>8.3f} {r.link_traversals:>6} {r.bus_gbps:>10.1f}")
        out.append("time = bandwidth + latency + resends + header fallbacks (--header-fallback); phy = FEC receive "
                   "latency inside latency (link traversals x per-link PHY ns); model and sources: "
                   "protocol/cluster/flat.py")
        return "\n".join(out)

    cl = asdict(first)
    for k in ("ranks", "code", "fec", "ber"):
        cl.pop(k)
    obj: dict = {"cluster": cl, "rows": [asdict(r) for _, r in rows]}
    if len(rows) == 1:
        obj = {**asdict(rows[0][1]), **obj}
    emit(args, obj, text)
    return 0


def _run_nccl_tests(args: argparse.Namespace) -> int:
    from protocol.cluster.ncclfile import compare, diagnose, read_nccl_tests

    _check_nccl_tests_args(args)
    run_ = read_nccl_tests(args.nccl_tests, op=args.op)
    c = _cluster_of_run(args, run_)
    table = _table(args)
    rows = compare(run_, c, algo=args.algo, proto=args.proto, table=table)
    notes = diagnose(run_, rows, c)
    zl = list(run_.meta.get("zero_byte_lines", ()))
    left_out = ([f"note: 0-byte rows (line {', '.join(map(str, zl))}) left out: NCCL moves nothing, there is no "
                 "model time to compare"] if zl else [])
    cal = None
    held: list[int] = []
    if args.calibrate is not None:
        cal, held = _calibrate_to_run(args, run_, c, rows, notes, table)
    ratios = [r["ratio"] for r in rows]
    summary = {"min_ratio": min(ratios), "max_ratio": max(ratios),
               "worst_ratio": max(max(ratios), 1 / min(ratios))}
    if held:
        hr = [rows[i]["calibrated_ratio"] for i in held]
        summary["held_out_worst_ratio"] = max(max(hr), 1 / min(hr))
    obj = {"file": args.nccl_tests, "op": run_.op, "ranks": run_.ranks, "nodes": run_.nodes, "form": run_.form,
           "cluster": c.to_dict(), "rows": rows, "diagnosis": notes, "underperforming": any(
               n.startswith("UNDERPERFORMING") for n in notes), "below_expected": any(
               n.startswith(("UNDERPERFORMING", "BELOW EXPECTED")) for n in notes), "summary": summary,
           "calibration": cal, "zero_byte_lines_left_out": zl}
    emit(args, obj, lambda: _nccl_tests_text(args, run_, c, rows, notes, left_out, cal, held, summary))
    return 0


def _check_nccl_tests_args(args: argparse.Namespace) -> None:
    """Refuse options a measured nccl-tests run cannot be compared under (it fixes ranks, sizes and
    BER), and an unwritable ``--calibrate`` file before any fitting."""
    if is_flat(args):
        raise CliError("--nccl-tests compares with the cluster model; choose a --cluster other than flat-ethernet")
    if args.trials:
        raise CliError("--trials and --nccl-tests do not go together (a measured run has no BER)")
    if args.ranks is not None or getattr(args, "_bytes_given", False):
        raise CliError(f"{'--ranks' if args.ranks is not None else '--bytes'} and --nccl-tests do not go together: "
                       f"the ranks and sizes are the file's ({args.nccl_tests})")
    if any(b > 0 for b in args.ber):
        raise CliError(f"--ber {max(args.ber):g} and --nccl-tests do not go together (a measured run has no BER)")
    for flag, vals in (("--code", args.code), ("--fec", args.fec)):
        if len(vals) > 1:
            raise CliError(f"{flag} {','.join(vals)}: --nccl-tests compares one cluster with the run; give one value")
    if args.holdout and args.calibrate is None:
        raise CliError("--holdout needs --calibrate OUT")
    if args.calibrate is not None:
        from phy802.runtime.output import check_output_file

        check_output_file(args.calibrate, inputs=[args.nccl_tests])  # before the fit, not after it


def _cluster_of_run(args: argparse.Namespace, run_):
    """The cluster the run is compared with: the options, with the run's nodes, GPUs per node and GPU
    where the options leave them open; its ranks must be the run's."""
    over: dict = {"code": args.code[0], "fec": args.fec[0], "ber": args.ber[0]}
    if run_.nodes is not None and args.nodes is None:
        over["nodes"] = run_.nodes
    if run_.gpus_per_node is not None and args.gpus_per_node is None:
        over["gpus_per_node"] = run_.gpus_per_node
    if run_.gpu is not None and args.gpu is None:
        over["gpu"] = run_.gpu
    c = spec_from_args(args, **over)
    if run_.ranks is not None and run_.ranks != c.ranks:
        raise CliError(f"{args.nccl_tests}: the run has {run_.ranks} ranks, the cluster {c.ranks} "
                       f"(--nodes {c.nodes} x --gpus-per-node {c.gpus_per_node})")
    return c


def _calibrate_to_run(args: argparse.Namespace, run_, c, rows: list[dict], notes: list[str],
                      table) -> tuple[dict, list[int]]:
    """``(calibration, held-out row indices)``: the model fitted to the run's rows (every ``--holdout``-th
    left out), written to ``--calibrate``; each row gains its calibrated time and ratio."""
    from protocol.cluster.ncclfile import apply_calibration, calibrate, compare, write_calibration

    k = args.holdout
    use = [i for i in range(len(rows)) if not (k and i % k == k - 1)]
    held = [i for i in range(len(rows)) if i not in use]
    cal = calibrate(run_, c, algo=args.algo, proto=args.proto, table=table, use=use)
    cal["diagnosis"] = notes
    write_calibration(args.calibrate, cal)
    cc = apply_calibration(c, cal)
    for r, r2 in zip(rows, compare(run_, cc, algo=args.algo, proto=args.proto, table=table)):
        r["calibrated_us"] = r2["predicted_us"]
        r["calibrated_ratio"] = r2["ratio"]
    return cal, held


def _nccl_tests_text(args: argparse.Namespace, run_, c, rows: list[dict], notes: list[str], left_out: list[str],
                     cal: dict | None, held: list[int], summary: dict) -> str:
    """The comparison table ``phy802 collective --nccl-tests`` prints (measured vs model per size),
    the notes, and the calibration when one was fitted."""
    out = [f"{args.nccl_tests}: {run_.op}, {run_.ranks} ranks on {run_.nodes} nodes ({run_.form})",
           f"model: {c.describe().rsplit(', links', 1)[0]}",
           f"{'size B':>12} {'measured us':>12} {'predicted us':>12} {'ratio':>6} {'meas busbw':>10} "
           f"{'pred busbw':>10} {'algo/proto':<17}" + (f" {'calibrated':>10} {'ratio':>6}" if cal else "")]
    for i, r in enumerate(rows):
        line = (f"{r['bytes']:>12} {r['measured_us']:>12.4g} {r['predicted_us']:>12.4g} {r['ratio']:>6.2f} "
                f"{r['measured_busbw']:>10.4g} {r['predicted_busbw']:>10.4g} {r['algo'] + '/' + r['proto']:<17}")
        if cal:
            line += f" {r['calibrated_us']:>10.4g} {r['calibrated_ratio']:>6.2f}" + (" held out" if i in held else "")
        out.append(line)
    out.append(f"ratio = measured / predicted: {summary['min_ratio']:.2f} .. {summary['max_ratio']:.2f} "
               "(measured: nccl-tests; predicted: model values, before calibration)")
    out += notes + left_out
    if cal:
        out.append(f"calibration written to {args.calibrate}: net efficiency {cal['net_efficiency']:.3g} "
                   f"(default {0.94}), latency offset {cal['latency_offset_us']:.3g} us, rms log ratio "
                   f"{cal['rms_log_ratio']:.3g}" + (f"; held-out worst ratio {summary['held_out_worst_ratio']:.2f}"
                                                    if held else ""))
        if cal.get("not_identified"):
            out.append("  not identified by these sizes (left at their defaults): " + ", ".join(cal["not_identified"]))
        for line in cal.get("implausible", ()):
            out.append("  IMPLAUSIBLE (written, not a healthy cluster's constant): " + line)
        if cal["structure"] == "per-algorithm":
            unused = sorted(set(cal["algo_latency_us"]) - set(cal["algos_chosen"]))
            out.append("  per algorithm (NCCL's table refitted to this run): " + ", ".join(
                f"{a} {cal['algo_latency_us'][a]:+.3g} us, bw x {cal['algo_bw_factor'][a]:.3g}"
                for a in cal["algos_chosen"]) + (
                f" (not chosen at any fitted size: {', '.join(unused)})" if unused else "") + (
                f"; sustained busbw ceiling {cal['sustained_busbw_GBps']:.3g} GB/s"
                if cal["sustained_busbw_GBps"] else ""))
        if notes:
            out.append("the fit describes this run, not a healthy cluster (see above)")
    return "\n".join(out)
