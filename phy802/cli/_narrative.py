"""The opening of ``phy802 demo``'s ``report.md``: what this run shows, in a few sentences computed
from the run's own numbers (nothing canned), and which numbers are measured and which are models.

Input is the demo's summary dict (``summary.json``): ``vectors``, ``sweep`` (rows of
:meth:`phy802.sweep.PointResult.row`), ``latency_ns`` (mode -> added latency, model), ``trace``
(the trace metadata) and, when training ran, ``training`` (rows of ``phy802 experiment``),
``training_recipes`` (the settings each recipe gave the runs with errors: :func:`recipe_sentence`) and
``tradeoff.rows_64_ranks`` (rows of ``phy802 tradeoff``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["narrative", "fastest", "MEASURED_VS_MODEL", "recipe_sentence", "ber_kind_sentence"]

MEASURED_VS_MODEL = (
    "**Measured or model.** Counts, error ratios, intervals and losses are *measured* by this run "
    "(95% Clopper-Pearson intervals; an interval of a point with no errors is a one-sided upper "
    "bound, written `< x`). *Model* values are marked as such: the added receive latency "
    "(`protocol.latency`: documented pipeline cycle counts at 1 GHz), the closed-form `theory` "
    "columns (independent errors), the payload BER of the codeword-level sweep (3 x the "
    "decoder-output BER; the trace measures it) and the step times of the tradeoff section "
    "(`protocol.cluster`: NCCL's cost model on a DGX H100 cluster, simulated loss recovery), which it joins "
    "with the measured losses. Section 4's `step_ms` is different: the *measured* CPU wall time of the "
    "small model trained here."
)


def _g(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _sweep_sentences(rows: list[dict], lat: dict[str, float]) -> list[str]:
    if not rows:
        return []
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    pts = sorted({r["x"] for r in rows})
    axis = rows[0].get("axis", "ber")
    unit = "pre-FEC BER" if axis == "ber" else "SNR (dB)"
    out = [f"The sweep ran {len(modes)} modes ({', '.join(modes)}) at {len(pts)} channel points, {unit} "
           f"{_g(pts[0])} to {_g(pts[-1])}, {sum(r['codewords'] for r in rows):,} codewords in all (measured)."]
    for m in sorted(modes, key=lambda m: -lat.get(m, 0.0)):
        mine = sorted((r for r in rows if r["mode"] == m), key=lambda r: r["channel_ber"])
        clean = [r for r in mine if r["codeword_errors"] == 0]
        dirty = [r for r in mine if r["codeword_errors"] > 0]
        lat_txt = f" (added latency {lat[m]:.1f} ns, model)" if m in lat else ""
        parts = []
        if clean:
            worst_clean = max(clean, key=lambda r: r["channel_ber"])
            parts.append(f"delivered no wrong codeword up to pre-FEC BER {_g(worst_clean['pre_fec_ber'])} "
                         f"(0 of {worst_clean['codewords']:,}: FER < {_g(worst_clean['fer_hi'])})")
        if dirty:
            first = dirty[0]
            ratio = first["post_fec_ber"] / first["pre_fec_ber"] if first["pre_fec_ber"] > 0 else float("nan")
            how = ("passes the line errors through" if ratio > 0.5
                   else f"cuts the BER {1 / ratio:,.0f}-fold" if ratio > 0 else "")
            parts.append(f"at pre-FEC BER {_g(first['pre_fec_ber'])} it {how + ': ' if how else 'has '}post-FEC BER "
                         f"{_g(first['post_fec_ber'])} [{_g(first['post_fec_ber_lo'])}, {_g(first['post_fec_ber_hi'])}], "
                         f"FER {_g(first['fer'])}")
        out.append(f"**{m}**{lat_txt}: " + "; ".join(parts) + ".")
    if len(lat) >= 2 and all(m in lat for m in modes):
        hi_m = max(modes, key=lambda m: lat[m])
        lo_m = min(modes, key=lambda m: lat[m])
        if lat[hi_m] > lat[lo_m]:
            out.append(f"Choosing **{lo_m}** over **{hi_m}** saves {lat[hi_m] - lat[lo_m]:.1f} ns per receiver "
                       "(model) and pays for it in the residual errors above; `latency.png` puts the two side by side.")
    return out


def _trace_sentence(meta: dict, trained: bool) -> list[str]:
    pre, post = meta.get("pre_fec", {}), meta.get("post_fec", {})
    if not pre or not post:
        return []
    dec = post.get("decoder_output", {})
    dec_txt = f", decoder-output BER {_g(dec.get('ber'), 3)}" if dec else ""
    ratio = post["ber"] / dec["ber"] if dec and dec.get("ber") else float("nan")
    return [f"The {meta.get('fec')}-mode error trace ({_g(float(meta.get('line_bits', 0)))} line bits) measured pre-FEC BER "
            f"{_g(pre.get('ber'), 3)}{dec_txt} and payload BER {_g(post.get('ber'), 3)} after the descrambler"
            + (f" ({ratio:.2f}x: each surviving error becomes three)" if math.isfinite(ratio) else "")
            + ("; the training below replays these payload flips." if trained
               else "; `phy802 train --source trace` replays these payload flips.")]


def _clip_text(clip: str, grad_clip: float) -> str:
    """What the clipping settings of a run do (``integration.train.CLIPS``)."""
    if clip == "none" or not grad_clip:
        return "no global gradient-norm clipping"
    if clip == "wide":
        return f"global gradient-norm clipping at {grad_clip:g}, the norm summed in float64 (a flipped exponent does not overflow it)"
    return (f"global gradient-norm clipping at {grad_clip:g} with an fp32 norm (one gradient above ~1.8e19 "
            "overflows it and that step's update is zeroed)")


def recipe_sentence(setup: dict) -> str:
    """Which training recipe the runs used and the settings it gave them (one ``training_recipes`` entry:
    ``recipe``, ``about`` (``integration.train.RECIPE_HELP``), ``inferred``, ``optimizer``, ``clip``,
    ``grad_clip``, ``source``, ``fec``)."""
    mark = " -- **inferred** from the study, not quoted" if setup.get("inferred") else ""
    return (f"Recipe `{setup['recipe']}`{mark} ({setup['about']}): here optimizer {setup['optimizer']}, "
            f"{_clip_text(setup['clip'], setup['grad_clip'])}; errors from source `{setup['source']}` "
            f"with `--fec {setup['fec']}`.")


def ber_kind_sentence(r: dict) -> str:
    """For a training row with errors: the BER it was given and its kind (``ber_is``, a setting) and
    the payload BER it delivered (``ber_delivered``, measured)."""
    dlv = r.get("ber_delivered")
    dlv_txt = ("not recorded" if dlv is None or not math.isfinite(dlv)
               else f"{_g(dlv, 3)} (measured: every flip that reached a received payload over the payload bits received)")
    return (f"BER {_g(r['ber'])} given, of kind {r.get('ber_is', 'unknown')} (a setting); "
            f"delivered payload BER {dlv_txt}")


def _training_sentences(rows: list[dict], recipes: list[dict] | None = None) -> list[str]:
    if not rows:
        return []
    out = [recipe_sentence(s) for s in recipes or []]
    # one error-free shadow per (parallelism, recipe): each row with errors is compared with its own
    for par, recipe in dict.fromkeys((r["parallel"], r.get("recipe", "default")) for r in rows):
        mine = [r for r in rows if r["parallel"] == par and r.get("recipe", "default") == recipe]
        base = next((r for r in mine if r["ber"] == 0), None)
        if base is None:
            continue
        bits = []
        for r in mine:
            if r is base:
                continue
            v, d = r["final_val_loss"], r["delta_val_loss"]
            if v is None or not math.isfinite(v):
                verdict = "diverged (non-finite loss)"
            elif abs(d) < 0.05:
                verdict = f"stayed close to error-free ({d:+.3f})"
            else:
                verdict = f"{'lost' if d > 0 else 'gained'} {abs(d):.3f}"
            extra = f", {r['nonfinite_steps']} steps with non-finite gradients" if r.get("nonfinite_steps") else ""
            bits.append(f"guard `{r['guard']}` at {ber_kind_sentence(r)}: loss {_g(v, 4)}, {verdict}{extra}")
        seeds = max(int(r.get("seeds") or 1) for r in mine)
        how = "one seed: indicative" if seeds == 1 else f"mean of {seeds} seeds"
        out.append(f"{par.upper()} training, recipe `{recipe}`: the error-free run ended at validation loss "
                   f"{_g(base['final_val_loss'], 4)}; " + "; ".join(bits)
                   + f" (losses measured, {how}; no number of the training is a model or a prediction).")
    return out


def fastest(rows: list[dict], digits: int = 3) -> list[dict]:
    """The rows with the lowest ``vs_ref`` -- every row equal to it at the ``digits`` decimals the
    report prints (a tie is reported as a tie, not as one winner picked by row order)."""
    best = min(round(r["vs_ref"], digits) for r in rows)
    return [r for r in rows if round(r["vs_ref"], digits) == best]


def _tradeoff_sentences(rows: list[dict]) -> list[str]:
    """The fastest ways to the target loss among the tradeoff rows (modelled time x measured loss):
    on an error-free line and at each BER with errors."""
    def ok(r: dict) -> bool:
        return isinstance(r.get("vs_ref"), (int, float)) and math.isfinite(r["vs_ref"])

    if not any(ok(r) for r in rows):
        return []
    bits = []
    for ber in sorted({r["ber"] for r in rows}):
        at = [r for r in rows if r["ber"] == ber and ok(r)]
        if not at:
            continue
        tied = fastest(at)
        names = [f"**{r['mode']}**" + (f" with guard `{r['guard']}`" if ber and r.get("guard") not in (None, "", "-")
                                       else "") for r in tied]
        who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] + " (tied)"
        bits.append(f"{'error-free' if not ber else f'at BER {_g(ber)}'}: {who}, "
                    f"{tied[0]['vs_ref']:.3f}x the time of error-free KP4")
    failed = [r for r in rows if not ok(r)]
    txt = ("Joining the measured losses with modelled step times (64 ranks, GPT-2 small, section 5), the fastest "
           "way to the target loss is, " + "; ".join(bits) + " (model x measured)")
    if failed:
        names = ", ".join(f"{r['mode']} `{r['guard']}` at {_g(r['ber'])}" for r in failed[:3])
        txt += f"; {len(failed)} of {len(rows)} settings never reach it ({names}{', ...' if len(failed) > 3 else ''})"
    return [txt + "."]


def narrative(summary: dict[str, Any]) -> list[str]:
    """Markdown lines: the report's opening section (what this run shows + measured vs model)."""
    lines = ["## What this run shows", ""]
    v = summary.get("vectors")
    if v:
        n = v["passed"] + v["failed"]
        if v["failed"] == 0:
            lines.append(f"- All {n} known-answer vector files passed: the emulator reproduces the blocks bit for bit.")
        else:
            bad = [f.get("path", "?") for f in v.get("files", []) if not f.get("ok", True)]
            lines.append(f"- **{v['failed']} of {n} known-answer vector files FAILED** ({', '.join(bad[:3])}): "
                         "the numbers below come from an emulator that does not match its vectors.")
    lat = summary.get("latency_ns") or {}
    for s in _sweep_sentences(summary.get("sweep") or [], lat):
        lines.append(f"- {s}")
    meta = (summary.get("trace") or {}).get("meta") or {}
    for s in _trace_sentence(meta, bool(summary.get("training"))):
        lines.append(f"- {s}")
    for s in _training_sentences(summary.get("training") or [], summary.get("training_recipes")):
        lines.append(f"- {s}")
    for s in _tradeoff_sentences((summary.get("tradeoff") or {}).get("rows_64_ranks") or []):
        lines.append(f"- {s}")
    lines += ["", MEASURED_VS_MODEL, ""]
    return lines
