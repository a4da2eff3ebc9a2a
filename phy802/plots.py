"""Plots of a BER/FER sweep: ``ber_fer.png`` and the latency / reliability Pareto picture ``latency.png``.

Both are written as PNG (matplotlib's ``Agg`` backend, no display needed) atomically (rendered in
memory, then :func:`phy802.runtime.output.atomic_write_bytes`).  Conventions shared by both pictures:

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

__all__ = ["plot_ber_fer", "plot_latency", "plot_pareto", "pareto_layout", "mode_style", "MARKERS"]

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
    from phy802.runtime.output import atomic_write_bytes

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
    plt = _mpl()
    cfg = result.config
    modes = _modes(result) or list(cfg.modes)
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 6.0), layout="constrained")
    xlim, offs = _ber_fer_x(result, modes)
    show_theory = not cfg.precoding and cfg.burst_pb is None
    handles: dict[str, object] = {}
    for ax, key, title, ylabel in zip(axes, ("post_fec_ber", "fer"),
                                      ("post-FEC BER at the decoder output (payload BER after the descrambler: ~3x)",
                                       "codeword error ratio (FER)"),
                                      ("post-FEC BER (wrong message bits / message bits)",
                                       "FER (wrong codewords / codewords)")):
        theory_handles = _ber_fer_theory(ax, modes, key, xlim) if show_theory else []
        yvals = _ber_fer_points(ax, result, modes, key, offs, handles)
        _ber_fer_axes(ax, xlim, yvals, title, ylabel, theory_handles)
    chan = "AWGN" if cfg.burst_pb is None else f"DFE bursts pb={cfg.burst_pb:g}"
    pre = ", precoded" if cfg.precoding else ""
    fig.suptitle(f"{cfg.rate} {chan}{pre}, {cfg.simulator} simulator: measured points with 95% Clopper-Pearson "
                 "intervals" + ("; lines: closed forms (independent errors)" if show_theory else ""), fontsize=10)
    hs = dict(handles)
    hs["_bound"] = _bound_handle(plt)
    fig.legend(list(hs.values()), [h.get_label() if k == "_bound" else k for k, h in hs.items()],
               loc="outside lower center", ncol=min(len(hs), 7), fontsize=8, frameon=False)
    _save_png(plt, fig, path)


def _ber_fer_x(result, modes: list[str]) -> tuple[tuple[float, float], dict[str, float]]:
    """``(x limits, x offset per mode)``: the SNR range with a margin, each mode's points moved
    sideways (all within ~8% of the axis) so that equal values stay visible side by side."""
    snrs = [p.snr_db for p in result.points] or [15.0, 18.0]
    s_lo, s_hi = min(snrs), max(snrs)
    span = max(s_hi - s_lo, 0.5)
    xlim = (s_lo - 0.06 * span - 0.1, s_hi + 0.06 * span + 0.1)
    width = 0.02 * (xlim[1] - xlim[0]) * min(1.0, 4.0 / max(1, len(modes) - 1))  # all modes within ~8%
    offs = dict(zip(modes, _dodge(len(modes), width)))
    half = (len(modes) - 1) * width / 2
    return (xlim[0] - half, xlim[1] + half), offs


def _ber_fer_theory(ax, modes: list[str], key: str, xlim: tuple[float, float]) -> list:
    """Draw each mode's closed form of ``key`` over the x range, identical curves once (named by all
    their modes); returns the lines."""
    from phy802.sweep import theory_point

    grid = np.linspace(*xlim, 240)
    curves = {m: np.array([theory_point(m, s)[key] for s in grid]) for m in modes}
    groups: list[list[str]] = []
    for m in modes:
        for g in groups:
            if np.allclose(curves[g[0]], curves[m], rtol=1e-9, atol=0.0, equal_nan=True):
                g.append(m)
                break
        else:
            groups.append([m])
    lines = []
    for j, g in enumerate(groups):
        color = mode_style(modes.index(g[0])).color if len(g) == 1 else "0.35"
        (ln,) = ax.semilogy(grid, curves[g[0]], ls=_LINESTYLES[j % len(_LINESTYLES)], color=color, lw=1.2,
                            alpha=0.75, zorder=1)
        ln.set_label(textwrap.fill(" = ".join(g), 44))
        lines.append(ln)
    return lines


def _ber_fer_points(ax, result, modes: list[str], key: str, offs: dict[str, float], handles: dict) -> list[float]:
    """Draw the measured ``key`` of each mode's points (95% intervals; a zero-error point as a hollow
    upper bound with an arrow); adds each mode's legend handle to ``handles`` (first panel's kept);
    returns the values the y axis must show."""
    yvals: list[float] = []
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
    return yvals


def _ber_fer_axes(ax, xlim: tuple[float, float], yvals: list[float], title: str, ylabel: str,
                  theory_handles: list) -> None:
    """One panel's axes: log y around the values, labels, grid, the closed forms' legend below it and
    the closed-form pre-FEC BER on a top axis."""
    ylo, yhi = _log_limits(yvals, pad=2.5)
    ax.set_yscale("log")
    ax.set_ylim(ylo, min(yhi, 3.0))
    ax.set_xlim(*xlim)
    ax.set_xlabel("SNR (dB), PAM4 Es/sigma^2")
    ax.set_ylabel(ylabel)
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


def _latency_rows(modes: list[str], lat: dict[str, float]) -> dict[str, float]:
    """Row of each mode on the categorical y axis of ``latency.png``: 0, 1, 2, ... in order of added
    latency (ties keep the sweep's mode order), lowest latency at the bottom.  Equal latencies get
    rows of their own (the axis is categorical: a row is a mode, not a latency value)."""
    order = sorted(modes, key=lambda m: (lat[m], modes.index(m)))
    return {m: float(i) for i, m in enumerate(order)}


def _channel_offsets(xs: Sequence[float], band: float = 0.6) -> dict[float, float]:
    """Offset inside a mode's row of each channel point: one fixed sub-line per channel point,
    the same in every row (lowest BER / highest SNR on top), so that no two points of a row can sit
    on each other and equal values line up (no data-dependent jitter)."""
    xs = sorted(xs)
    if len(xs) < 2:
        return {x: 0.0 for x in xs}
    step = band / (len(xs) - 1)
    return {x: band / 2 - j * step for j, x in enumerate(xs)}


def plot_latency(result, latency_ns: Callable[[str], float], path) -> None:
    """PNG: the latency / reliability Pareto picture.

    y: one row per mode (a categorical axis), in order of its added receive latency
    (``latency_ns(mode)``, a model value, written in the row's label); inside a row one fixed line
    per channel point (the same in every row); x: the measured post-FEC BER (decoder output, left)
    and codeword error ratio (right), one marker shape per mode, one colour per channel point.  Zero-error points are 95% upper
    bounds (hollow, arrow to the left); nothing is joined by lines.  A mode is worth its latency
    where no mode below it reaches the same BER.
    """
    plt = _mpl()
    from matplotlib.lines import Line2D

    cfg = result.config
    modes = _modes(result) or list(cfg.modes)
    lat = {m: float(latency_ns(m)) for m in modes}
    ypos = _latency_rows(modes, lat)
    xs_all = sorted({p.x for p in result.points})
    if cfg.axis != "ber":
        xs_all = xs_all[::-1]  # highest SNR = lowest BER first
    sub = _channel_offsets(xs_all) if cfg.axis == "ber" else dict(zip(xs_all, _channel_offsets(range(len(xs_all))).values()))
    cmap = plt.get_cmap("viridis")
    colors = {x: cmap(0.85 * i / max(1, len(xs_all) - 1)) for i, x in enumerate(xs_all)}
    fig, axes = plt.subplots(1, 2, figsize=(12.5, max(5.0, 1.8 + 0.5 * len(modes) + 0.12 * len(modes) * len(xs_all))),
                             sharey=True, layout="constrained")
    for ax, key, title in zip(axes, ("post_fec_ber", "fer"),
                              ("post-FEC BER (decoder output)", "codeword error ratio (FER)")):
        for m in modes:
            ax.axhspan(ypos[m] - 0.4, ypos[m] + 0.4, color="0.95", lw=0, zorder=0)  # the mode's row
        ests = [(p, p.rates()[key]) for p in result.points if p.mode in ypos]
        xvals: list[float] = []
        for p, est in ests:
            xvals += [est.hi, est.hi / 6] if est.events == 0 else [est.value, est.lo, est.hi]
        xlo, xhi = _log_limits(xvals, pad=2.0)
        xhi = min(xhi, 3.0)
        for p, est in ests:
            st = mode_style(modes.index(p.mode))
            y, c = ypos[p.mode] + sub[p.x], colors[p.x]
            if est.events == 0:
                ax.plot([est.hi], [y], ls="none", marker=st.marker, ms=7, mfc="white", mec=c, mew=1.6, zorder=3)
                _bound_arrow(ax, est.hi, y, c, "left")
            else:
                ax.errorbar([est.value], [y], xerr=[[est.value - est.lo], [est.hi - est.value]], fmt=st.marker, ms=7,
                            color=c, mec="black", mew=0.5, capsize=2.5, zorder=4)
        ax.set_xscale("log")
        ax.set_xlim(xlo, xhi)
        ax.set_xlabel(title + " (measured; lower is better)", fontsize=9)
        ax.grid(True, axis="x", which="major", alpha=0.35)
    rows_up = sorted(modes, key=ypos.__getitem__)
    axes[0].set_yticks([ypos[m] for m in rows_up])
    axes[0].set_yticklabels([f"{m}\n+{lat[m]:.1f} ns" for m in rows_up], fontsize=8)
    axes[0].set_ylim(-0.6, len(modes) - 0.4)
    axes[0].set_ylabel("receive mode, + added latency (model)\nrows by latency, lowest at the bottom;\n"
                       "in a row: one line per channel point", fontsize=8)
    def point_name(x: float) -> str:
        return f"pre-FEC BER {x:.3g}" if cfg.axis == "ber" else f"SNR {x:.3g} dB"

    ch = [Line2D([], [], ls="none", marker="s", ms=8, color=colors[x], label=point_name(x)) for x in xs_all]
    mk = [Line2D([], [], ls="none", marker=mode_style(i).marker, ms=8, color="0.5", mec="black", mew=0.5, label=m)
          for i, m in enumerate(modes)]
    hs = ch + mk + [_bound_handle(plt)]
    fig.legend(handles=hs, loc="outside right center", fontsize=8, frameon=False,
               title="colour: channel point\n(top line of a row: lowest BER)\nshape: mode",
               title_fontsize=8)
    fig.suptitle(f"{cfg.rate}: added latency vs reliability per mode ({cfg.simulator} simulator, 95% Clopper-Pearson "
                 "intervals)", fontsize=10)
    _save_png(plt, fig, path)


# --- the tradeoff picture (``phy802 tradeoff`` / ``phy802 demo``: ``pareto.png``) -------------------

#: colour per BER, in BER order: dark first (BER 0), no light colours (no yellow on white)
_BER_COLORS = ("#1a1a1a", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#b8327f", "#00727a", "#6b6b6b")
#: fill per guard: "-" = the mode delivers no errors (guard irrelevant)
_GUARD_FILLS = {"-": "full", "none": "none", "nan_to_zero_clamp": "left", "skip_nonfinite_step": "bottom",
                "exponent_protection": "right"}
_GUARD_TEXT = {"-": "filled: no errors delivered (guard not used)", "none": "hollow: guard none",
               "nan_to_zero_clamp": "left half: nan_to_zero_clamp", "skip_nonfinite_step": "bottom half: "
               "skip_nonfinite_step", "exponent_protection": "right half: exponent_protection"}
_PARALLEL_ORDER = ("ddp", "fsdp", "pp")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pareto_layout(rows: list[dict], reference: str = "kp4/ieee", clip_pct: float = 10.0) -> dict:
    """Where every tradeoff row goes in ``pareto.png`` (pure data; the plot and the tests read it).

    One figure row per setting (parallel, mode, BER, guard), sorted by parallel, BER, then mode
    order; one step-time panel per cluster size, all on one shared x axis: step time relative to
    error-free ``reference`` at the same size (%).  Points above ``+clip_pct`` % (or the largest
    on-scale value, whichever is smaller) are *off scale*: drawn at the right edge with their value
    written beside them.  Returns ``settings`` (list of dicts), ``sizes``, ``ref_ms`` per
    (parallel, ranks), ``pct`` per (setting index, ranks), ``xlim`` and ``off`` (set of
    (setting index, ranks) drawn at the edge).
    """
    pars = sorted({r["parallel"] for r in rows}, key=lambda p: (_PARALLEL_ORDER + (p,)).index(p))
    sizes = sorted({int(r["ranks"]) for r in rows})
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    keys = list(dict.fromkeys((r["parallel"], r["mode"], float(r["ber"]), str(r.get("guard", "-"))) for r in rows))
    keys.sort(key=lambda k: (pars.index(k[0]), k[2], modes.index(k[1]), k[3]))
    ref_ms = {}
    for r in rows:
        if r["mode"] == reference and float(r["ber"]) == 0.0 and _finite(r.get("step_ms")):
            ref_ms.setdefault((r["parallel"], int(r["ranks"])), float(r["step_ms"]))
    by = {(r["parallel"], r["mode"], float(r["ber"]), str(r.get("guard", "-")), int(r["ranks"])): r for r in rows}
    pct: dict[tuple[int, int], float] = {}
    for i, k in enumerate(keys):
        for n in sizes:
            r, ref = by.get((*k, n)), ref_ms.get((k[0], n))
            if r is not None and ref and _finite(r.get("step_ms")):
                pct[(i, n)] = 100.0 * (float(r["step_ms"]) / ref - 1.0)
    vals = list(pct.values()) or [0.0]
    on = [v for v in vals if v <= clip_pct]
    hi = max(on + [0.0])
    lo = min(on + [0.0])
    pad = 0.06 * max(hi - lo, 0.5)
    xlim = (lo - pad, hi + pad)
    off = {key for key, v in pct.items() if v > xlim[1]}
    settings = [{"parallel": k[0], "mode": k[1], "ber": k[2], "guard": k[3],
                 "loss_penalty": next((by[(*k, n)].get("loss_penalty") for n in sizes if (*k, n) in by), None),
                 "tolerated": next((by[(*k, n)].get("tolerated") for n in sizes if (*k, n) in by), None),
                 "loss_side": next((by[(*k, n)].get("loss_side") for n in sizes if (*k, n) in by), None)}
                for k in keys]
    return {"settings": settings, "sizes": sizes, "ref_ms": ref_ms, "pct": pct, "xlim": xlim, "off": off,
            "modes": modes, "pars": pars}


def plot_pareto(rows: list[dict], path, reference: str = "kp4/ieee", clip_pct: float = 10.0,
                loss_side: str | None = None) -> None:
    """PNG: what each FEC mode costs in modelled step time and in measured loss, per cluster size.

    ``rows``: tradeoff rows (``parallel``, ``mode``, ``ber``, ``guard``, ``ranks``, ``step_ms``,
    ``loss_penalty``; other fields are ignored).  One line per setting, so no marker or label can
    sit on another's and modes with equal values stay visible side by side; left panel: the loss
    penalty (measured); then one panel per cluster size: step time relative to error-free
    ``reference`` at that size (model), on one x axis shared by all sizes so that small and large
    differences look as they are.  Colour = BER, marker = mode, fill = guard (legend); the only line
    is 0 % (the reference).  Points beyond the axis sit at its right edge with their value written.
    ``loss_side``: rows judged by a predicted threshold (``tolerated`` set) show their verdict in the
    loss panel instead of a penalty, and this sentence goes under the title.
    """
    plt = _mpl()
    lay = pareto_layout(rows, reference, clip_pct)
    sets, sizes = lay["settings"], lay["sizes"]
    style = _pareto_style(lay)
    n = max(1, len(sets))
    fig, axes = plt.subplots(1, 1 + len(sizes), sharey=True, figsize=(3.2 + 3.1 * len(sizes) + 3.0, 1.6 + 0.27 * n),
                             gridspec_kw={"width_ratios": [0.8] + [1.0] * len(sizes)}, squeeze=False)
    axes = axes[0]
    ys = list(range(n))[::-1]  # first setting on top
    _pareto_loss_panel(axes[0], lay, ys, style, reference)
    for ax, size in zip(axes[1:], sizes):
        _pareto_step_panel(ax, size, rows, lay, ys, style, reference)
    for ax in axes:
        ax.grid(True, axis="x", alpha=0.3)
        for y in ys:
            ax.axhline(y, color="0.93", lw=0.6, zorder=0)
        ax.tick_params(axis="x", labelsize=7.5)
    _pareto_legend(fig, lay, style, reference)
    if loss_side is None:
        fig.suptitle("Is skipping FEC worth it? Loss penalty (measured, small model) and step time (model) per "
                     "setting", fontsize=10)
    else:
        import textwrap

        fig.suptitle("Is skipping FEC worth it? Loss side predicted for the larger model (threshold, unchecked) and "
                     "step time (model) per setting\n" + "\n".join(textwrap.wrap(loss_side, 120)[:5]), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - 2.9 / fig.get_figwidth(), 0.97 if loss_side is None else 0.88))
    _save_png(plt, fig, path)


def _pareto_style(lay: dict) -> dict:
    """Colour per BER, marker per mode, fill per guard, and ``draw(ax, x, y, setting, clip)``: one
    setting's point (a right-pointing filled marker when ``clip``: beyond the axis)."""
    bers = sorted({s["ber"] for s in lay["settings"]})
    color = {b: _BER_COLORS[i % len(_BER_COLORS)] for i, b in enumerate(bers)}
    marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(lay["modes"])}

    def fill(g):
        return _GUARD_FILLS.get(g, "top")

    def draw(ax, x, y, s, clip=False):
        ax.plot([x], [y], ls="none", marker=">" if clip else marker[s["mode"]], ms=8 if clip else 7.5,
                color=color[s["ber"]], mec=color[s["ber"]], mfc=color[s["ber"]] if clip else None,
                fillstyle="full" if clip else fill(s["guard"]), mew=1.2, zorder=3, clip_on=False)

    return {"bers": bers, "color": color, "marker": marker, "fill": fill, "draw": draw}


def _pareto_loss_panel(ax, lay: dict, ys: list[int], style: dict, reference: str) -> None:
    """The left panel: each setting's loss penalty (measured), and the settings' names on the y axis
    (the error-free reference in bold red)."""
    sets, draw = lay["settings"], style["draw"]
    lp = [s["loss_penalty"] for s in sets if _finite(s["loss_penalty"])]
    lhi, llo = max(lp + [0.0]), min(lp + [0.0])
    lpad = 0.08 * max(lhi - llo, 0.05)
    ax.set_xlim(llo - lpad, lhi + lpad)
    for y, s in zip(ys, sets):
        if s.get("loss_side") == "predicted":  # a threshold's verdict, no penalty (protocol/cluster/sizefit.py)
            ax.text(0.5, y, f"predicted: {s['tolerated']}", transform=ax.get_yaxis_transform(), ha="center",
                    va="center", fontsize=7, color="0.2")
        elif _finite(s["loss_penalty"]):
            draw(ax, s["loss_penalty"], y, s)
        else:
            ax.text(0.5, y, "no target reached / diverged", transform=ax.get_yaxis_transform(), ha="center",
                    va="center", fontsize=7, color="0.3")
    ax.axvline(0.0, color="0.5", lw=0.8, zorder=1)
    ax.set_xlabel("loss penalty vs error-free\n(nats, measured)", fontsize=8)
    ax.set_title("loss side", fontsize=9)
    labels = []
    for s in sets:
        par = f"{s['parallel'].upper()} " if len(lay["pars"]) > 1 else ""
        g = "" if s["guard"] in ("-", "") else f", {s['guard']}"
        labels.append(f"{par}{s['mode']}  BER {s['ber']:g}{g}")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7.5)
    for tl, s in zip(ax.get_yticklabels(), sets):
        if s["mode"] == reference and s["ber"] == 0.0:
            tl.set_color("red")
            tl.set_fontweight("bold")
    ax.set_ylim(-0.7, len(ys) - 0.3)


def _pareto_step_panel(ax, size: int, rows: list[dict], lay: dict, ys: list[int], style: dict, reference: str) -> None:
    """One cluster size's panel: each setting's modelled step time relative to the reference at that
    size; a point beyond the axis sits at its right edge with its value written."""
    sets, draw, color = lay["settings"], style["draw"], style["color"]
    xlo, xhi = lay["xlim"]
    for (i, nn), v in lay["pct"].items():
        if nn != size:
            continue
        s, y = sets[i], ys[i]
        if (i, nn) in lay["off"]:
            draw(ax, xhi, y, s, clip=True)
            ms = next((r["step_ms"] for r in rows if r["ranks"] == size and r["mode"] == s["mode"]
                       and float(r["ber"]) == s["ber"] and str(r.get("guard", "-")) == s["guard"]
                       and r["parallel"] == s["parallel"]), float("nan"))
            ax.annotate(f"{v:+.0f} % ({ms:.3g} ms)", (xhi, y), xytext=(-9, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=7, color=color[s["ber"]])
        else:
            draw(ax, v, y, s)
    for i, s_ in enumerate(sets):  # a setting whose modelled step never completes: said, not left blank
        r = next((r for r in rows if int(r["ranks"]) == size and r["mode"] == s_["mode"] and r["parallel"]
                  == s_["parallel"] and float(r["ber"]) == s_["ber"] and str(r.get("guard", "-")) == s_["guard"]),
                 None)
        if r is not None and (i, size) not in lay["pct"]:
            ax.text(0.98, ys[i], "no finite step time (model)", transform=ax.get_yaxis_transform(), ha="right",
                    va="center", fontsize=7, color=color[s_["ber"]])
    ax.axvline(0.0, color="red", lw=0.9, ls=":", zorder=1)
    ax.set_xlim(xlo, xhi)
    refs = ", ".join(f"{ms:.4g} ms" for (p, nn), ms in lay["ref_ms"].items() if nn == size)
    ax.set_title(f"{size} ranks (0 % = {refs})", fontsize=9)
    ax.set_xlabel("modelled step time vs error-free\n" + reference.upper().replace("/IEEE", "") + " (%, model)",
                  fontsize=8)


def _pareto_legend(fig, lay: dict, style: dict, reference: str) -> None:
    """The legend at the figure's right: colour = BER, marker = mode, fill = guard, the 0 % line and
    the beyond-the-axis marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    color, marker, fill = style["color"], style["marker"], style["fill"]
    hs = [Patch(color=color[b], label=f"BER {b:g}") for b in style["bers"]]
    hs += [Line2D([], [], ls="none", marker=marker[m], ms=7, color="0.35", label=m) for m in lay["modes"]]
    guards = list(dict.fromkeys(s["guard"] for s in lay["settings"]))
    hs += [Line2D([], [], ls="none", marker="o", ms=8, color="0.35", mec="0.35", fillstyle=fill(g),
                  label=_GUARD_TEXT.get(g, f"top half: {g}")) for g in guards]
    hs += [Line2D([], [], color="red", ls=":", lw=0.9, label=f"0 %: error-free {reference} (reference)"),
           Line2D([], [], ls="none", marker=">", ms=8, color="0.35",
                  label="beyond the axis: value written")]
    fig.legend(handles=hs, loc="center right", fontsize=7.5, frameon=False,
               title="colour = BER\nmarker = mode\nfill = guard", title_fontsize=8)
