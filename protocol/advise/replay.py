"""Replay the per-link policy over a series of histogram snapshots with SPEC D7's fallback.

SPEC D7: the FEC_degraded_SER monitor keeps running on the corrected path; when the symbol error
ratio over its interval crosses the activate threshold, the link's fast classes revert to
``kp4/ieee`` until the ratio falls below the deactivate threshold (hysteresis).  802.3bs leaves
the thresholds programmable and their defaults open ([?], reference notes), so both are
parameters here (:class:`MonitorConfig`); the default activate threshold is the RS symbol error
ratio at which RS(272) misses the target FER on independent errors, deactivate half of it.

Per port and interval (``snapshot[i+1] - snapshot[i]``) the monitor reads the interval's symbol
error ratio from the histogram itself (corrected symbols = each bin's count x its symbol count, a
ranged bin at its lower end, so the ratio is a lower bound there; uncorrectable codewords count
``t + 1``), measured, no fit.  The risk of a mode in an interval is counted from the same
histogram (measured): ``kp4/ieee``/``kp4/llr`` the uncorrectable codewords reported; ``rs272`` the
codewords with more than 7 corrected symbols (RS(272)'s t = 7: an upper bound, a 544-symbol
codeword holds two 272-symbol ones); ``bypass``/``unequal`` the codewords with any symbol error
(delivered errors).  Step time per interval: the time model of the slowest mode running
(:func:`protocol.advise.fabric.evaluate`'s rule).  The monitor's own window (thousands of
codewords, microseconds) is far shorter than a snapshot interval, so a fallback is taken to act from
the start of the interval whose ratio crosses the threshold [I]: the adaptive row is a best case
for the monitor by up to one window per crossing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .policy import REFERENCE_MODE, AdviseConfig, LinkAdvice

__all__ = ["MonitorConfig", "interval_ser", "failed_codewords", "replay_policy", "replay_text", "plot_replay"]

_KEEP = (REFERENCE_MODE, "kp4/llr")  # modes that are already the fallback (D7 reverts only the fast classes)


@dataclass(frozen=True)
class MonitorConfig:
    """FEC_degraded_SER thresholds: RS symbol error ratio per interval that activates / clears it."""

    activate_ser: float
    deactivate_ser: float

    def __post_init__(self) -> None:
        if not 0 < self.deactivate_ser <= self.activate_ser < 1:
            raise ValueError(f"degraded-SER thresholds need 0 < deactivate ({self.deactivate_ser:g}) <= activate "
                             f"({self.activate_ser:g}) < 1")

    @classmethod
    def default(cls, target_fer: float, activate: float | None = None, deactivate: float | None = None) -> "MonitorConfig":
        """``activate`` defaults to the symbol error ratio at which RS(272) reaches ``target_fer`` on
        independent errors (:func:`phy802.theory.rs_codeword_error_ratio`), ``deactivate`` to half of it."""
        if activate is None:
            from scipy.optimize import brentq

            from phy802 import theory

            code = theory.CODES["rs272"]
            f = lambda ls: math.log(float(theory.rs_codeword_error_ratio(10.0 ** ls, code))) - math.log(target_fer)
            activate = 10.0 ** brentq(f, -12.0, -0.5, xtol=1e-9)
        return cls(float(activate), float(deactivate if deactivate is not None else activate / 2))


def interval_ser(hist, n: int) -> float:
    """Corrected RS symbols per symbol in one interval's histogram (ranged bins at their lower end)."""
    cw = hist.total + (hist.uncorrectable or 0)
    if cw <= 0:
        return 0.0
    t = max(b.high for b in hist.bins)
    sym = sum(b.count * b.low for b in hist.bins) + (hist.uncorrectable or 0) * (t + 1)
    return sym / (cw * n)


def failed_codewords(hist, mode: str) -> int:
    """Codewords of the interval that ``mode`` would not have delivered clean (module docstring)."""
    code, _, fec = mode.partition("/")
    unc = int(hist.uncorrectable or 0)
    if fec in ("bypass", "unequal"):
        return unc + sum(b.count for b in hist.bins if b.low >= 1)
    if code == "rs272":
        return unc + sum(b.count for b in hist.bins if b.low > 7)
    return unc


def replay_policy(intervals: list, links: list[LinkAdvice], mon: MonitorConfig, cfg: AdviseConfig, ts,
                  fits: dict) -> dict:
    """Per link and interval the mode run, the monitor's fallbacks and returns, and per scenario
    (static FEC everywhere, static per-link, adaptive per-link with D7) the failed codewords counted
    and the step time per interval of the first workload."""
    from .fabric import _ber_hi, _burst_pb, _step

    from phy802.telemetry.fit import CODES

    n = CODES["kp4"].n
    base = {x.port: x.mode for x in links}
    ports = []
    per = {p.name: [] for p in intervals[0].ports}
    for tel in intervals:
        names = {p.name for p in tel.ports}
        if names != set(per):
            raise ValueError(f"{tel.source}: the ports differ from the first interval's")
        for p in tel.ports:
            per[p.name].append(p.hist)
    for x in links:
        degraded = False
        modes, sers, fb, back = [], [], [], []
        for i, h in enumerate(per[x.port]):
            s = interval_ser(h, n) if h.bins else 0.0
            sers.append(s)
            if not degraded and s >= mon.activate_ser:
                degraded = True
                if base[x.port] not in _KEEP:
                    fb.append(i)
            elif degraded and s < mon.deactivate_ser:
                degraded = False
                if base[x.port] not in _KEEP:
                    back.append(i)
            modes.append(REFERENCE_MODE if degraded and base[x.port] not in _KEEP else base[x.port])
        ports.append({"port": x.port, "base_mode": base[x.port], "modes": modes, "ser": sers,
                      "fallbacks": fb, "returns": back})
    k = len(intervals)
    wl = ts.workloads[0]
    cache: dict = {}
    worst = {}
    for x in links:
        for m in {base[x.port], REFERENCE_MODE}:
            if m not in worst or _ber_hi(x) > _ber_hi(worst[m]):
                worst[m] = x

    def step_ms(modes: set) -> float:
        return max(1e3 * _step(ts, wl, m, _ber_hi(worst[m]), _burst_pb(worst[m], fits), cache).step_s for m in modes)

    scen = {}
    for name, pick in (("fec_everywhere", lambda r, i: REFERENCE_MODE), ("per_link_static", lambda r, i: r["base_mode"]),
                       ("per_link_adaptive", lambda r, i: r["modes"][i])):
        failed = [sum(failed_codewords(per[r["port"]][i], pick(r, i)) for r in ports) for i in range(k)]
        steps = [step_ms({pick(r, i) for r in ports}) for i in range(k)]
        scen[name] = {"failed_codewords": failed, "failed_total": int(sum(failed)), "step_ms": steps,
                      "mean_step_ms": sum(steps) / k}
    return {"monitor": {"activate_ser": mon.activate_ser, "deactivate_ser": mon.deactivate_ser,
                        "source": "SPEC D7 FEC_degraded_SER; thresholds programmable"},
            "intervals": k, "workload": wl, "sources": [t.source for t in intervals], "ports": ports,
            "scenarios": scen,
            "fallbacks": sum(len(p["fallbacks"]) for p in ports),
            "note": "SER and failed codewords: measured (counted from each interval's histogram); step time: model"}


def replay_text(rep: dict) -> str:
    """The replay in a few lines: switches made, and the scenarios side by side."""
    out = [f"replay over {rep['intervals']} intervals (D7 monitor: activate SER {rep['monitor']['activate_ser']:.3g}, "
           f"clear below {rep['monitor']['deactivate_ser']:.3g}; SER and failures measured, step time model):"]
    moved = [p for p in rep["ports"] if p["fallbacks"] or p["returns"]]
    for p in moved:
        ev = [f"fallback to {REFERENCE_MODE} at interval {i}" for i in p["fallbacks"]]
        ev += [f"back to {p['base_mode']} at interval {i}" for i in p["returns"]]
        out.append(f"  {p['port']:<14} {p['base_mode']:<12} " + "; ".join(ev)
                   + f" (SER per interval {', '.join(f'{s:.2g}' for s in p['ser'])})")
    if not moved:
        out.append("  no link crossed the monitor's threshold: no switches")
    out.append(f"  {'scenario':<18} {'failed codewords':>16} {'mean step ms':>13}  ({rep['workload']})")
    for name, s in rep["scenarios"].items():
        out.append(f"  {name:<18} {s['failed_total']:>16} {s['mean_step_ms']:>13.5g}")
    return "\n".join(out)


#: one colour per mode in the replay plot (fixed, so every plot reads the same)
MODE_COLOURS = {"kp4/ieee": "#4c72b0", "kp4/llr": "#8172b2", "rs272/ieee": "#55a868", "kp4/unequal": "#ccb974",
                "kp4/bypass": "#c44e52"}


def plot_replay(rep: dict, path) -> None:
    """Links x time coloured by the mode each ran, fallbacks marked; PNG written atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from phy802.runtime.output import atomic_write_bytes

    modes = list(MODE_COLOURS)
    ports = rep["ports"]
    k = rep["intervals"]
    grid = np.array([[modes.index(m) for m in p["modes"]] for p in ports], dtype=float)
    h = max(3.0, min(14.0, 0.16 * len(ports) + 1.5))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * k + 4.0), h))
    ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=ListedColormap([MODE_COLOURS[m] for m in modes]),
              vmin=-0.5, vmax=len(modes) - 0.5)
    fx = [i for p in ports for i in p["fallbacks"]]
    fy = [j for j, p in enumerate(ports) for _ in p["fallbacks"]]
    rx = [i for p in ports for i in p["returns"]]
    ry = [j for j, p in enumerate(ports) for _ in p["returns"]]
    if fx:
        ax.scatter(fx, fy, marker="x", s=60, c="black", label="D7 fallback to kp4/ieee")
    if rx:
        ax.scatter(rx, ry, marker="o", s=40, facecolors="none", edgecolors="black", label="monitor cleared: back")
    ax.set_yticks(range(len(ports)))
    ax.set_yticklabels([p["port"] for p in ports], fontsize=6 if len(ports) > 24 else 8)
    ax.set_xticks(range(k))
    ax.set_xlabel("interval (snapshot i -> i+1)")
    ax.set_ylabel("link (worst first)")
    s = rep["scenarios"]
    ax.set_title(f"per-link policy replayed with the D7 fallback ({rep['fallbacks']} fallbacks)\nfailed codewords: "
                 f"adaptive {s['per_link_adaptive']['failed_total']}, static {s['per_link_static']['failed_total']}, "
                 f"FEC everywhere {s['fec_everywhere']['failed_total']}", fontsize=8)
    handles = [Patch(color=MODE_COLOURS[m], label=m) for m in modes if (grid == modes.index(m)).any()]
    hs, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + hs, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
