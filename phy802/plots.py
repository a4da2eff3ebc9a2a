"""Plots of a BER/FER sweep: ``ber_fer.png`` and the latency / reliability Pareto picture ``latency.png``.

Both are written as PNG (matplotlib's ``Agg`` backend, no display needed) atomically (rendered in
memory, then :func:`phy802._io.atomic_write_bytes`).  Conventions shared by both pictures:

* one marker shape per mode (same shape in both files), filled = measured value with its 95%
  Clopper-Pearson interval as an error bar;
* a point with **zero observed errors** is not a value but a one-sided 95% upper bound: it is drawn
  as a hollow marker at the bound with an arrow pointing to lower values, and is never joined by a
  line to anything;
* modes that share a value (e.g. ``bypass`` and ``none``, whose delivered bits are the same
  process) are offset slightly so that none hides another; identical closed-form curves are drawn
  once, labelled with every mode they belong to;
* "post-FEC BER" is the bit error ratio of the message bits **at the decoder output** (before the
  descrambler); the payload BER after the 1 + x^39 + x^58 descrambler is about 3x that (see the
  README, "Two post-FEC BERs").

matplotlib is imported lazily (only these functions need it).
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from phy802 import theory

__all__ = ["plot_ber_fer", "plot_latency", "mode_style", "MARKERS"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">", "p", "*", "d")  # 13: coprime with the 10 colours
_LINESTYLES = ("-", "--", ":", "-.")
_ARROW_PT = 16  # length of an upper-bound arrow, in points


@dataclass(frozen=True)
class ModeStyle:
    """How one mode is drawn: marker shape, colour, size and drawing order."""

    marker: str
    color: str
    size: float
    zorder: float


def mode_style(index: int) -> ModeStyle:
    """Style of the ``index``-th mode of a sweep: earlier modes get larger markers drawn underneath,
    so a later mode at the same place stays visible inside an earlier one."""
    return ModeStyle(MARKERS[index % len(MARKERS)], f"C{index % 10}", max(5.0, 9.0 - 0.8 * index), 3.0 + 0.1 * index)


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_png(plt, fig, path) -> None:
    """Render ``fig`` to PNG in memory, close it, and write ``path`` atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    from phy802._io import atomic_write_bytes

    atomic_write_bytes(path, buf.getvalue())


def _modes(result) -> list[str]:
    present = {p.mode for p in result.points}
    return [m for m in result.config.modes if m in present]


def _dodge(n: int, step: float) -> list[float]:
    return [(i - (n - 1) / 2.0) * step for i in range(n)]


def _log_limits(values: Sequence[float], pad: float = 3.0, floor_decades: float = 1.0) -> tuple[float, float]:
    """Log-axis limits around the positive ``values``, padded by a factor ``pad`` each side."""
    v = [x for x in values if x > 0 and math.isfinite(x)]
    if not v:
        return 1e-12, 1.0
    lo, hi = min(v) / pad, max(v) * pad
    if hi / lo < 10 ** floor_decades:
        mid = math.sqrt(lo * hi)
        lo, hi = mid / 10 ** (floor_decades / 2), mid * 10 ** (floor_decades / 2)
    return lo, hi


def _ber_ticks(snr_lo: float, snr_hi: float, min_gap: float) -> list[tuple[float, float]]:
    """(SNR, BER) pairs for 'nice' pre-FEC BERs (1, 2, 5 x 10^k) inside [snr_lo, snr_hi], at least
    ``min_gap`` dB apart (1 x 10^k preferred)."""
    b_lo, b_hi = float(theory.pam4_ber(snr_hi)), float(theory.pam4_ber(snr_lo))
    cands = []
    for e in range(int(math.floor(math.log10(b_lo))) - 1, int(math.ceil(math.log10(b_hi))) + 1):
        for mant in (1, 2, 5):
            b = mant * 10.0 ** e
            if b_lo <= b <= b_hi and b < 0.375:
                cands.append((0 if mant == 1 else 1, theory.snr_db_for_ber(b), b))
    chosen: list[tuple[float, float]] = []
    for _, s, b in sorted(cands):  # decades first, then fill in 2 and 5 where there is room
        if all(abs(s - c) >= min_gap for c, _ in chosen):
            chosen.append((s, b))
    return sorted(chosen)


def _fmt_ber(b: float) -> str:
    e = int(math.floor(math.log10(b) + 1e-9))
    m = b / 10 ** e
    return f"1e{e}" if abs(m - 1) < 1e-6 else f"{m:.2g}e{e}"


def _bound_arrow(ax, x: float, y: float, color: str, direction: str) -> None:
    """An arrow from the upper bound at (x, y) towards lower values ('down' or 'left')."""
    off = (0, -_ARROW_PT) if direction == "down" else (-_ARROW_PT, 0)
    ax.annotate("", xy=(x, y), xytext=off, textcoords="offset points",
                arrowprops=dict(arrowstyle="<|-", color=color, lw=1.1, shrinkA=0, shrinkB=0, mutation_scale=9),
                zorder=2.5)


def _bound_handle(plt):
    from matplotlib.lines import Line2D

    return Line2D([], [], marker="o", ls="none", mfc="none", mec="0.3", ms=7,
                  label="hollow + arrow: 0 errors seen,\n95% upper bound (one-sided)")


def plot_ber_fer(result, path) -> None:
    """PNG: post-FEC BER (decoder output) and codeword error ratio vs SNR, one marker per mode.

    Measured points carry 95% Clopper-Pearson error bars; zero-error points are upper bounds
    (hollow, arrow down).  Lines are the closed forms (independent errors, no precoding; identical
    curves drawn once).  The top axis gives the closed-form pre-FEC BER at each SNR.
    """
    from phy802.sweep import theory_point

    plt = _mpl()
    cfg = result.config
    modes = _modes(result) or list(cfg.modes)
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 6.0), layout="constrained")
    snrs = [p.snr_db for p in result.points] or [15.0, 18.0]
    s_lo, s_hi = min(snrs), max(snrs)
    span = max(s_hi - s_lo, 0.5)
    xlim = (s_lo - 0.06 * span - 0.1, s_hi + 0.06 * span + 0.1)
    width = 0.02 * (xlim[1] - xlim[0]) * min(1.0, 4.0 / max(1, len(modes) - 1))  # all modes within ~8%
    offs = dict(zip(modes, _dodge(len(modes), width)))
    half = (len(modes) - 1) * width / 2
    xlim = (xlim[0] - half, xlim[1] + half)
    show_theory = not cfg.precoding and cfg.burst_pb is None
    grid = np.linspace(*xlim, 240)
    handles: dict[str, object] = {}
    for ax, key, title in zip(axes, ("post_fec_ber", "fer"),
                              ("post-FEC BER at the decoder output (payload BER after the descrambler: ~3x)",
                               "codeword error ratio (FER)")):
        yvals: list[float] = []
        theory_handles = []
        if show_theory:
            curves = {m: np.array([theory_point(m, s)[key] for s in grid]) for m in modes}
            groups: list[list[str]] = []
            for m in modes:
                for g in groups:
                    if np.allclose(curves[g[0]], curves[m], rtol=1e-9, atol=0.0, equal_nan=True):
                        g.append(m)
                        break
                else:
                    groups.append([m])
            for j, g in enumerate(groups):
                color = mode_style(modes.index(g[0])).color if len(g) == 1 else "0.35"
                (ln,) = ax.semilogy(grid, curves[g[0]], ls=_LINESTYLES[j % len(_LINESTYLES)], color=color, lw=1.2,
                                    alpha=0.75, zorder=1)
                ln.set_label(textwrap.fill(" = ".join(g), 44))
                theory_handles.append(ln)
        for i, m in enumerate(modes):
            st = mode_style(i)
            pts = [p for p in result.points if p.mode == m]
            xs, ys, lo, hi = [], [], [], []
            for p in pts:
                est = p.rates()[key]
                x = p.snr_db + offs[m]
                if est.events == 0:
                    ax.plot([x], [est.hi], ls="none", marker=st.marker, ms=st.size, mfc="white", mec=st.color,
                            mew=1.4, zorder=st.zorder)
                    _bound_arrow(ax, x, est.hi, st.color, "down")
                    yvals += [est.hi, est.hi / 8]
                    continue
                xs.append(x), ys.append(est.value), lo.append(est.value - est.lo), hi.append(est.hi - est.value)
                yvals += [est.value, est.lo, est.hi]
            if xs:
                h = ax.errorbar(xs, ys, yerr=[lo, hi], fmt=st.marker, ms=st.size, color=st.color, mec="black",
                                mew=0.5, capsize=2.5, elinewidth=1.1, zorder=st.zorder)
            else:
                (h,) = ax.plot([], [], ls="none", marker=st.marker, ms=st.size, color=st.color, mec="black", mew=0.5)
            handles.setdefault(m, h)
        ylo, yhi = _log_limits(yvals, pad=2.5)
        ax.set_yscale("log")
        ax.set_ylim(ylo, min(yhi, 3.0))
        ax.set_xlim(*xlim)
        ax.set_xlabel("SNR (dB), PAM4 Es/sigma^2")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        if theory_handles:
            ax.legend(handles=theory_handles, title="closed forms (lines)", loc="upper center", fontsize=7,
                      title_fontsize=7, bbox_to_anchor=(0.5, -0.13), ncol=min(2, len(theory_handles)), frameon=False)
        top = ax.twiny()
        top.set_xlim(*xlim)
        ticks = _ber_ticks(*xlim, min_gap=0.09 * (xlim[1] - xlim[0]))
        top.set_xticks([s for s, _ in ticks])
        top.set_xticklabels([_fmt_ber(b) for _, b in ticks], fontsize=8)
        top.set_xlabel("pre-FEC BER (closed form, PAM4 Gray, AWGN)", fontsize=8)
    chan = "AWGN" if cfg.burst_pb is None else f"DFE bursts pb={cfg.burst_pb:g}"
    pre = ", precoded" if cfg.precoding else ""
    fig.suptitle(f"{cfg.rate} {chan}{pre}, {cfg.simulator} simulator: measured points with 95% Clopper-Pearson "
                 "intervals" + ("; lines: closed forms (independent errors)" if show_theory else ""), fontsize=10)
    hs = dict(handles)
    hs["_bound"] = _bound_handle(plt)
    fig.legend(list(hs.values()), [h.get_label() if k == "_bound" else k for k, h in hs.items()],
               loc="outside lower center", ncol=min(len(hs), 7), fontsize=8, frameon=False)
    _save_png(plt, fig, path)


def _latency_rows(modes: list[str], lat: dict[str, float]) -> dict[str, float]:
    """y position per mode: as close to its latency as possible with rows at least 7% of the span
    apart, so that no marker or label sits on another's (1-D label placement: runs of rows that
    would overlap are centred on their mean latency and merged until none overlap)."""
    order = sorted(modes, key=lambda m: (lat[m], modes.index(m)))
    vals = [lat[m] for m in order]
    sep = 0.07 * max(max(vals) - min(vals), 1.0)
    runs: list[list[int]] = [[i] for i in range(len(order))]  # indices into order

    def start(run: list[int]) -> float:
        return float(np.mean([vals[i] for i in run])) - (len(run) - 1) * sep / 2

    merged = True
    while merged:
        merged = False
        for k in range(len(runs) - 1):
            if start(runs[k]) + (len(runs[k]) - 1) * sep + sep > start(runs[k + 1]) + 1e-12:
                runs[k:k + 2] = [runs[k] + runs[k + 1]]
                merged = True
                break
    ypos: dict[str, float] = {}
    for run in runs:
        y0 = start(run)
        for j, i in enumerate(run):
            ypos[order[i]] = y0 + j * sep
    return ypos


def plot_latency(result, latency_ns: Callable[[str], float], path) -> None:
    """PNG: the latency / reliability Pareto picture.

    y: added receive latency of each mode (``latency_ns(mode)``, a model value); x: the measured
    post-FEC BER (decoder output, left) and codeword error ratio (right) at each channel point,
    one marker shape per mode, one colour per channel point.  Zero-error points are 95% upper
    bounds (hollow, arrow to the left); nothing is joined by lines.  A mode is worth its latency
    where no mode below it reaches the same BER.
    """
    plt = _mpl()
    from matplotlib.lines import Line2D

    cfg = result.config
    modes = _modes(result) or list(cfg.modes)
    lat = {m: float(latency_ns(m)) for m in modes}
    ypos = _latency_rows(modes, lat)
    yspan = max(max(lat.values()) - min(lat.values()), 1.0)
    xs_all = sorted({p.x for p in result.points})
    cmap = plt.get_cmap("viridis")
    colors = {x: cmap(0.9 * i / max(1, len(xs_all) - 1)) for i, x in enumerate(xs_all)}
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 5.2), sharey=True, layout="constrained")
    for ax, key, title in zip(axes, ("post_fec_ber", "fer"),
                              ("post-FEC BER (decoder output)", "codeword error ratio (FER)")):
        for m in modes:
            ax.axhline(ypos[m], color="0.85", lw=0.8, zorder=0)  # a row guide, not a connection
        ests = [(p, p.rates()[key]) for p in result.points if p.mode in ypos]
        xval = {id(p): (est.hi if est.events == 0 else est.value) for p, est in ests}
        xvals: list[float] = []
        for p, est in ests:
            xvals += [est.hi, est.hi / 6] if est.events == 0 else [est.value, est.lo, est.hi]
        xlo, xhi = _log_limits(xvals, pad=2.0)
        xhi = min(xhi, 3.0)
        # points of one mode that (nearly) coincide -- e.g. FER = 1 at several channel points, or
        # equal upper bounds -- are spread apart vertically inside their row, so none hides another
        near = 0.02 * math.log10(xhi / xlo)  # about one marker width
        dy: dict[int, float] = {}
        for m in modes:
            others = [abs(ypos[m] - ypos[o]) for o in modes if o != m]
            band = min(0.4 * min(others), 0.06 * yspan) if others else 0.06 * yspan  # half-height of the row
            mine = sorted((p for p, _ in ests if p.mode == m), key=lambda p: xval[id(p)])
            groups: list[list] = []
            for p in mine:
                lx = math.log10(max(xval[id(p)], 1e-300))
                if groups and lx - math.log10(max(xval[id(groups[-1][-1])], 1e-300)) < near:
                    groups[-1].append(p)
                else:
                    groups.append([p])
            for g in groups:
                step = min(0.02 * yspan, 2 * band / max(1, len(g) - 1))  # stays inside the row
                for p, d in zip(g, _dodge(len(g), step)):
                    dy[id(p)] = d
        for p, est in ests:
            st = mode_style(modes.index(p.mode))
            y, c = ypos[p.mode] + dy[id(p)], colors[p.x]
            if est.events == 0:
                ax.plot([est.hi], [y], ls="none", marker=st.marker, ms=8, mfc="white", mec=c, mew=1.6, zorder=3)
                _bound_arrow(ax, est.hi, y, c, "left")
            else:
                ax.errorbar([est.value], [y], xerr=[[est.value - est.lo], [est.hi - est.value]], fmt=st.marker, ms=8,
                            color=c, mec="black", mew=0.5, capsize=2.5, zorder=4)
        ax.set_xscale("log")
        ax.set_xlim(xlo, xhi)
        ax.set_xlabel(title + " (measured; lower is better)", fontsize=9)
        ax.grid(True, axis="x", which="major", alpha=0.35)
    axes[0].set_yticks([ypos[m] for m in modes])
    axes[0].set_yticklabels([f"{m}  {lat[m]:.1f} ns" for m in modes], fontsize=8)
    ys = list(ypos.values())
    pad = 0.08 * max(max(ys) - min(ys), 1.0) + 0.6
    axes[0].set_ylim(min(ys) - pad, max(ys) + pad)
    axes[0].set_ylabel("added receive latency (ns; model: protocol.latency)", fontsize=9)
    def point_name(x: float) -> str:
        return f"pre-FEC BER {x:.3g}" if cfg.axis == "ber" else f"SNR {x:.3g} dB"

    ch = [Line2D([], [], ls="none", marker="s", ms=8, color=colors[x], label=point_name(x)) for x in xs_all]
    mk = [Line2D([], [], ls="none", marker=mode_style(i).marker, ms=8, color="0.5", mec="black", mew=0.5, label=m)
          for i, m in enumerate(modes)]
    hs = ch + mk + [_bound_handle(plt)]
    fig.legend(handles=hs, loc="outside right center", fontsize=8, frameon=False, title="colour: channel\nshape: mode",
               title_fontsize=8)
    fig.suptitle(f"{cfg.rate}: added latency vs reliability per mode ({cfg.simulator} simulator, 95% Clopper-Pearson "
                 "intervals)", fontsize=10)
    _save_png(plt, fig, path)
