"""``phy802 collective``: modelled time of one collective over a cluster of 400G/200G links.

The alpha-beta model of :mod:`protocol.cluster.flat` (formulas and sources in its docstring):
bandwidth, path latency (NIC, switches, fibre and the FEC receive path of every link) and the
expected cost of resending dropped frames at the given pre-FEC BER.  ``--code``, ``--fec``,
``--ber`` and ``--ranks`` take comma-separated lists; one row per combination.
"""

from __future__ import annotations

import argparse

from phy802.cli._common import add_json, count_arg, emit, float_arg, int_arg, list_arg

__all__ = ["add_arguments", "run", "add_cluster_arguments", "cluster_from_args"]


def add_cluster_arguments(p: argparse.ArgumentParser, *, code: bool = True) -> None:
    """Cluster flags shared by ``collective`` and ``tradeoff`` (defaults from :class:`Cluster`)."""
    from phy802.cli._vocab import CODE_HELP, code_list
    from protocol.cluster.flat import Cluster, TOPOLOGIES

    d = Cluster()
    p.add_argument("--rate", choices=("400G", "200G"), default=d.rate, help=f"link rate (default {d.rate})")
    p.add_argument("--topology", choices=TOPOLOGIES, default=d.topology,
                   help=f"network: single-switch (2 links per path), leaf-spine (4 across leaves), "
                        f"three-tier (6 across pods) (default {d.topology})")
    if code:
        p.add_argument("--code", type=code_list, default=(d.code,), metavar="CODE[,CODE...]",
                       help=f"{CODE_HELP}; on every link, comma list (default {d.code})")
    p.add_argument("--switch-ns", type=float_arg(0, 1e9), default=d.switch_ns,
                   help=f"latency of one switch, ns (default {d.switch_ns:g})")
    p.add_argument("--nic-ns", type=float_arg(0, 1e9), default=d.nic_ns,
                   help=f"latency of one NIC traversal (two per path), ns (default {d.nic_ns:g})")
    p.add_argument("--fiber-m", type=float_arg(0, 1e7), default=d.fiber_m,
                   help=f"fibre length of each link, metres, {d.fiber_ns_per_m:g} ns/m (default {d.fiber_m:g})")
    p.add_argument("--step-ns", type=float_arg(0, 1e12), default=d.step_ns,
                   help=f"fixed software cost per collective step, ns (default {d.step_ns:g})")
    p.add_argument("--link-gbps", type=float_arg(0, 1e6, lo_open=True), default=None,
                   help="payload (MAC) rate of a link in Gb/s (default: 400 at 400G, 200 at 200G)")
    p.add_argument("--path-links", type=int_arg(1, 64), default=None,
                   help="override the PHY traversals per path (default: from --topology and --ranks)")
    p.add_argument("--ranks-per-leaf", type=int_arg(1, 10**7), default=d.ranks_per_leaf,
                   help=f"ranks under one leaf switch (default {d.ranks_per_leaf})")
    p.add_argument("--header-fallback", action="store_true",
                   help="bypass/unequal frames whose header is hit wait for the corrected path instead of being "
                        "dropped and resent (SPEC D3 reading; default: dropped, as protocol.delivery)")
    p.add_argument("--ranks-per-pod", type=int_arg(1, 10**7), default=d.ranks_per_pod,
                   help=f"ranks under one pod, three-tier (default {d.ranks_per_pod})")


def cluster_from_args(args: argparse.Namespace, **over):
    """A :class:`protocol.cluster.flat.Cluster` from the shared flags; ``over`` sets the rest."""
    from protocol.cluster.flat import Cluster

    if args.link_gbps is not None and args.link_gbps <= 0:
        raise ValueError(f"--link-gbps must be > 0, got {args.link_gbps}")
    kw = dict(rate=args.rate, topology=args.topology, switch_ns=args.switch_ns, nic_ns=args.nic_ns,
              fiber_m=args.fiber_m, step_ns=args.step_ns, link_gbps=args.link_gbps, path_links=args.path_links,
              ranks_per_leaf=args.ranks_per_leaf, ranks_per_pod=args.ranks_per_pod,
              header_fallback=args.header_fallback)
    kw.update(over)
    return Cluster(**kw)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from phy802.cli._vocab import FEC_HELP, fec_list
    from protocol.cluster.flat import OPS

    p.add_argument("--op", default="allreduce", choices=OPS, help="collective (default allreduce)")
    p.add_argument("--algo", default=None, choices=("ring", "tree", "direct"),
                   help="algorithm: ring or tree (allreduce, broadcast), direct (sendrecv); "
                   "default ring (direct for sendrecv)")
    p.add_argument("--ranks", type=list_arg(int_arg(1, 10**7)), default=(64,),
                   help="ranks, comma-separated list (default 64)")
    p.add_argument("--bytes", type=list_arg(count_arg(0, 10**15)), default=(25_000_000,),
                   help="message size in bytes, comma-separated list; 1e6 is fine (default 25e6: a 25 MB DDP bucket)")
    p.add_argument("--fec", type=fec_list, default=("ieee",), metavar="MODE[,MODE...]",
                   help=f"{FEC_HELP}; comma list (default ieee)")
    p.add_argument("--ber", type=list_arg(float_arg(0.0, 0.5, hi_open=True)),
                   default=(0.0,), help="pre-FEC line BER of every link, in [0, 0.5), comma-separated list (default 0)")
    add_cluster_arguments(p)
    add_json(p)


def run(args: argparse.Namespace) -> int:
    from protocol.cluster.flat import collective_time

    rows = []
    for n in args.ranks:
        for size in args.bytes:
            for code in args.code:
                for fec in args.fec:
                    for ber in args.ber:
                        c = cluster_from_args(args, ranks=n, code=code, fec=fec, ber=ber)
                        rows.append((c, collective_time(args.op, size, c, args.algo)))
    first = rows[0][0]

    def text() -> str:
        r0 = rows[0][1]
        out = [f"{r0.op} ({r0.algo}), {args.rate}, {args.topology}; path: 2 NICs x {first.nic_ns:g} ns, "
               f"switch {first.switch_ns:g} ns, fibre {first.fiber_m:g} m per link",
               f"{'ranks':>6} {'bytes':>10} {'code':<6} {'fec':<22} {'ber':>8} {'time us':>11} {'bw us':>10} "
               f"{'lat us':>9} {'resend us':>10} {'fallbk us':>9} {'phy us':>8} {'links':>6} {'busbw Gb/s':>10}"]
        for c, r in rows:
            out.append(f"{r.ranks:>6} {r.bytes:>10.4g} {r.code:<6} {r.fec:<22} {r.ber:>8.2g} {r.time_s * 1e6:>11.3f} "
                       f"{r.bandwidth_s * 1e6:>10.3f} {r.latency_s * 1e6:>9.3f} {r.resend_s * 1e6:>10.3f} {r.fallback_s * 1e6:>9.3f} "
                       f"{r.phy_s * 1e6:>8.3f} {r.link_traversals:>6} {r.bus_gbps:>10.1f}")
        out.append("time = bandwidth + latency + resends + header fallbacks (--header-fallback); phy = FEC receive latency inside latency "
                   "(link traversals x per-link PHY ns); model and sources: protocol/cluster/flat.py")
        return "\n".join(out)

    from dataclasses import asdict

    cl = asdict(first)
    for k in ("ranks", "code", "fec", "ber"):
        cl.pop(k)
    obj: dict = {"cluster": cl, "rows": [asdict(r) for _, r in rows]}
    if len(rows) == 1:
        obj = {**asdict(rows[0][1]), **obj}
    emit(args, obj, text)
    return 0
