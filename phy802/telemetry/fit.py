"""Fit channel models to a FEC codeword histogram and extrapolate its tail (``phy802 fec tail``).

A link's uncorrectable rate (FER ~1e-13 and below) is far too rare to observe; what hardware
counts is how many codewords needed 0, 1, 2, ... symbol corrections (:mod:`phy802.telemetry.bins`). This
module fits error models to those counts and reads the tail ``P(W > t)`` off the fitted model.

Models (``W`` = wrong RS symbols in one codeword of ``n`` symbols)
------------------------------------------------------------------
* ``binomial``: independent symbol errors, ``W ~ Binomial(n, p)``; pre-FEC BER from ``p`` for
  independent bit errors (``p = 1 - (1 - BER)^10``). One parameter.
* ``dfe``: 1-tap DFE error propagation on PAM4 symbols (:class:`phy802.channel.DfeBurst`,
  ``ErrorChain.dfe``; alternating error signs), 5 PAM4 symbols per 10-bit RS symbol; parameters
  the stationary PAM4 symbol error ratio ``ser`` and the propagation probability ``pb``; pre-FEC
  BER = ``ser / 2`` (Gray, one-level errors flip one of the two bits). Two parameters; ``pb = 0``
  is the binomial model.
* ``ge``: Gilbert-Elliott on PAM4 symbols (``ErrorChain.gilbert_elliott``): states G/B with
  transitions ``p_gb``/``p_bg`` and error probabilities ``e_g <= e_b``. Four parameters;
  ``e_g = e_b`` is the binomial model.

The burst models' codeword law is the exact Markov dynamic program of
:func:`phy802.theory.markov_symbol_error_pmf` (a Numba kernel here, truncated at ``t + 1`` so that
``P(W > t)`` is a sum of non-negative terms). Idealisation: a codeword's symbols are consecutive
on one lane; on a real Clause 119 link they are interleaved over 16/8 PCS lanes, so fitted burst
parameters are *effective* values that reproduce the codeword histogram, not a lane's raw DFE.

Fitting
-------
Binned maximum likelihood: bin ``i`` (inclusive ``[low, high]``, or the uncorrectable bin
``[t+1, n]`` when the histogram reports it) has model probability ``q_i``; the log-likelihood is
``sum_i c_i log(q_i / Q)`` with ``Q`` the model mass of the bins reported, so coarse vendor bins,
gaps and missing uncorrectable counts are handled by conditioning (a truncated multinomial).

Goodness of fit: Pearson ``X^2`` and the likelihood-ratio ``G^2`` against the saturated
multinomial, on bins pooled in order until each pooled group expects >= 5 codewords, with
``df = groups - 1 - parameters`` (no p-value when ``df < 1``). Model comparison: likelihood-ratio
tests against the binomial (``dfe``: boundary ``pb = 0``, p-value ``0.5 P(chi2_1 > LR)``;
``ge``: ``P(chi2_3 > LR)``, approximate) and AIC. A law whose ``G^2`` p-value is below ``gof_level``
(default 0.01) is rejected, one with ``df < 1`` untested (:func:`judge_fits`); ``best`` is the lowest
AIC among the laws that pass. When none passes, the fit's ``verdict`` says so and its FER, post-FEC
BER and margin are withheld from every report (a model's tail is only as good as its fit).

Extrapolation and intervals (95%)
---------------------------------
For each model: the codeword error ratio ``fer = P(W > t)``; the post-FEC BER
``E[W 1{W > t}] / n * b`` where ``b`` is the mean number of wrong bits per wrong RS symbol over
10 (failed words pass uncorrected, as in :func:`phy802.theory.post_fec_ber`); the pre-FEC BER; and
the **margin**: the factor ``s`` by which the pre-FEC BER can grow, with the error *shape* held
(binomial: BER x s; ``dfe``: ``ser`` x s at the same ``pb``; ``ge``: ``e_g, e_b`` x s, each capped
at 1, at the same transitions), before FER reaches ``target_fer`` (default ``1e-13``, the 802.3 MAC BER objective
used as a codeword-level target), reported as ``ber_at_target``, ``margin_factor``, ``margin_db``
= 10 log10(s) and ``snr_margin_db`` (the SNR drop from the fitted to the target BER on PAM4
AWGN, :func:`phy802.theory.snr_db_for_ber`; an AWGN equivalence, not a measured SNR).
Intervals: **profile likelihood** for the binomial (``2 (ll_max - ll(p)) <= 3.84``; every
prediction is monotone in ``p``), **parametric bootstrap** (percentile, ``bootstrap`` replicates
drawn from the fitted model with the observed number of codewords, refitted) for ``dfe``, and for
``ge`` the **joint likelihood region** ``2 (ll_max - ll(x)) <= chi2_4(0.95) = 9.49`` projected onto
the FER and the pre-FEC BER (their ranges over the region, by a Lagrangian sweep from every local
optimum and start of the point fit), the post-FEC BER and margin taken at the FER ends' parameters.
Why not the bootstrap for ``ge``: its likelihood has two modes (long mild / short intense bursts),
replicates drawn at one never visit the other, and the percentile interval covered 32/40 on
simulated histograms with a known FER; the 1-df profile covered 34/40; the projected region
covers at least its own 95% (``benchmarks/bench_tail.py`` measures it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as _st

from phy802 import theory
from phy802.telemetry.bins import FecHistogram

__all__ = ["CODES", "MODELS", "TailFit", "ModelFit", "fit_histogram", "model_pmf", "sample_histogram",
           "generator_channel", "read_fit", "DEFAULT_TARGET_FER", "sonic_baseline", "fmt_interval",
           "estimate_cpu_seconds", "DEFAULT_GOF_LEVEL", "mark_fec_off",
           "FEC_ACTIVE_FOR_CODE", "code_for_active_fec", "fec_mode_mismatch", "mark_fec_mismatch",
           "judge_fits"]

#: FER target of the margin (the 802.3 BER objective 1e-13 [C], used here per codeword)
DEFAULT_TARGET_FER = 1e-13
#: level of the goodness-of-fit test a law must pass before its tail is reported (G2 p-value >= level)
DEFAULT_GOF_LEVEL = 0.01
#: FEC modes of ethtool/YNL that mean no RS decoder counts the bins (telemetry_notes: RS, BaseR, LLRS, Off, Auto)
FEC_OFF_MODES = ("none", "off")
#: ethtool's active FEC encodings that run each code (``ethtool --show-fec``; the kernel's ETHTOOL_FEC_*
#: names): ``RS`` = the Clause 91/108/119 RS(528,514) or RS(544,514) (the name does not say which),
#: ``LLRS`` = the low-latency RS(272,257+1); ``BaseR`` is the Clause 74 FC-FEC, a Fire code, no RS code
FEC_ACTIVE_FOR_CODE = {"kp4": ("rs",), "kr4": ("rs",), "rs272": ("llrs",)}
#: active modes named in the kernel that no RS decoder of ours runs (``Auto`` is a setting, never active)
_FEC_OTHER_MODES = ("baser",)
#: PAM4 symbols per 10-bit RS symbol
UNITS = 5
CODES: dict[str, theory.RsCode] = {
    "kp4": theory.RsCode(544, 514, 10, "kp4"),
    "kr4": theory.RsCode(528, 514, 10, "kr4"),
    "rs272": theory.RsCode(272, 258, 10, "rs272"),  # RS(272,257+1), t = 7 (tradeoff_notes sec. 1)
}
MODELS = ("binomial", "dfe", "ge")
_N_PARAMS = {"binomial": 1, "dfe": 2, "ge": 4}
_MIN_BINS = {"binomial": 2, "dfe": 3, "ge": 5}
_CHI2_95 = float(_st.chi2.ppf(0.95, 1))
_SIMPLEX_STEP = {"dfe": 0.3, "ge": 0.5}  # initial Nelder-Mead step per transformed coordinate


# ------------------------------------------------------------------------------ model laws


@dataclass(frozen=True)
class _Law:
    q: np.ndarray        # P(W = w), w = 0..t
    fer: float           # P(W > t)
    ew_fail: float       # E[W 1{W > t}]
    ber: float           # pre-FEC BER
    bits_per_sym: float  # mean wrong bits per wrong RS symbol / 10

    @property
    def post_fec_ber(self) -> float:
        return 0.0 if self.fer == 0 else self.ew_fail / float(self._n) * self.bits_per_sym

    _n: int = 0


def _chain_arrays(model: str, p: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P, e, pi)`` of the 2-state chain (``theory.ErrorChain.dfe`` / ``gilbert_elliott``), with
    the stationary law in closed form."""
    if model == "dfe":
        ser, pb = p["ser"], p["pb"]
        pe = min(ser * (1.0 - pb) / (1.0 - ser), 1.0)  # DfeBurst.from_ser
        P = np.array([[1.0 - pe, pe], [1.0 - pb, pb]])
        e = np.array([0.0, 1.0])
        pi = np.array([1.0 - pb, pe]) / (1.0 - pb + pe)
    else:
        a, b = p["p_gb"], p["p_bg"]
        P = np.array([[1.0 - a, a], [b, 1.0 - b]])
        e = np.array([p["e_g"], p["e_b"]])
        pi = np.array([b, a]) / (a + b)
    return P, e, pi


def model_pmf(model: str, params: dict, code: theory.RsCode) -> _Law:
    """The model's codeword law at ``params`` (see the module docstring)."""
    n, t = code.n, code.t
    if model == "binomial":
        pr = float(params["p_symbol"])
        w = np.arange(t + 1)
        q = _st.binom.pmf(w, n, pr) if pr > 0 else (w == 0).astype(float)
        ber = float(theory.bit_error_prob(pr, code.m))
        fer = float(theory.rs_codeword_error_ratio(pr, code)) if pr > 0 else 0.0
        ew = float(theory.rs_post_fec_ser(pr, code)) * n if pr > 0 else 0.0
        return _Law(q, fer, ew, ber, (ber / pr) if pr > 0 else 0.1, n)
    if model not in ("dfe", "ge"):
        raise ValueError(f"unknown model {model!r} (choose from {', '.join(MODELS)})")
    from phy802.telemetry._kernels import chain_law

    q, fer, ew, ber, bps = chain_law(_MODEL_ID[model], _par_vec(model, params), n, t, UNITS)
    return _Law(np.asarray(q), float(fer), float(ew), float(ber), float(bps), n)


#: model ids of the compiled kernels (phy802.telemetry._kernels)
_MODEL_ID = {"dfe": 1, "ge": 2}


def _par_vec(model: str, p: dict) -> np.ndarray:
    if model == "dfe":
        return np.array([float(p["ser"]), float(p["pb"]), 0.0, 0.0])
    return np.array([float(p["p_gb"]), float(p["p_bg"]), float(p["e_g"]), float(p["e_b"])])


def _reference_pmf(model: str, params: dict, code: theory.RsCode) -> _Law:
    """The step-by-step DP (:func:`_tail_kernels.markov_count_pmf`): the oracle of the fast path."""
    from phy802.telemetry._kernels import block_transfer, markov_count_pmf

    n, t = code.n, code.t
    P, e, init = _chain_arrays(model, params)
    Nm, Ym = block_transfer(P, e, UNITS)
    out, ew = markov_count_pmf(Nm, Ym, init, n, t + 1)
    ser = float(init @ e)
    v = init * (1.0 - e)
    for _ in range(UNITS - 1):
        v = (v @ P) * (1.0 - e)
    p_sym = 1.0 - float(v.sum())
    bps = (UNITS * ser / p_sym / 10.0) if p_sym > 0 else 0.1
    return _Law(np.asarray(out[: t + 1]), float(out[t + 1]), float(ew), ser / 2.0, bps, n)


# ------------------------------------------------------------------------------ parameters


def _from_x(model: str, x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=float)
    if model == "binomial":
        return {"p_symbol": 10.0 ** float(np.clip(x[0], -20.0, -0.35))}
    if model == "dfe":
        ser = 10.0 ** float(np.clip(x[0], -20.0, -0.5))
        pb = float(np.clip(1.0 / (1.0 + math.exp(-float(np.clip(x[1], -30, 30)))), 0.0, 0.9999))
        return {"ser": ser, "pb": pb}
    eg, eb, pgb, pbg = (10.0 ** float(np.clip(v, -20.0, 0.0)) for v in x)
    if eg > eb:  # label the states so that B is the worse one
        eg, eb, pgb, pbg = eb, eg, pbg, pgb
    return {"p_gb": pgb, "p_bg": max(pbg, 1e-12), "e_g": eg, "e_b": eb}


def _to_x(model: str, p: dict) -> np.ndarray:
    if model == "binomial":
        return np.array([math.log10(max(p["p_symbol"], 1e-20))])
    if model == "dfe":
        pb = min(max(p["pb"], 1e-9), 0.9999)
        return np.array([math.log10(p["ser"]), math.log(pb / (1 - pb))])
    return np.log10(np.maximum([p["e_g"], p["e_b"], p["p_gb"], p["p_bg"]], 1e-20))


def scaled_params(model: str, p: dict, s: float) -> dict | None:
    """The model with its error probability scaled by ``s`` (shape held); None when out of range."""
    if model == "binomial":
        b = float(theory.bit_error_prob(p["p_symbol"])) * s
        return None if not 0 < b < 0.5 else {"p_symbol": float(theory.symbol_error_prob(b))}
    if model == "dfe":
        ser = p["ser"] * s
        return None if not 0 < ser < 0.5 else {"ser": ser, "pb": p["pb"]}
    eg, eb = p["e_g"] * s, p["e_b"] * s  # shape held only up to e_b s = 1 (the bad state's boundary)
    return None if eg >= 1.0 or eb > 1.0 else {**p, "e_g": eg, "e_b": eb}


# ------------------------------------------------------------------------------ likelihood


@dataclass(frozen=True)
class _Data:
    lows: np.ndarray
    highs: np.ndarray
    counts: np.ndarray   # bins, then the uncorrectable count last when has_fail
    has_fail: bool
    labels: tuple[str, ...]

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def _data(hist: FecHistogram, t: int) -> _Data:
    if hist.t is not None and hist.t != t:
        raise ValueError(f"{hist.source}: histogram is for t = {hist.t}, the code has t = {t}")
    for i, b in enumerate(hist.bins):
        if b.high > t:
            raise ValueError(f"{hist.source or 'histogram'}: hist[{i}].bin-high {b.high} exceeds t = {t} "
                             "of the code (choose the right --code)")
    lows = np.array([b.low for b in hist.bins], np.int64)
    highs = np.array([b.high for b in hist.bins], np.int64)
    counts = [b.count for b in hist.bins]
    labels = [b.label() for b in hist.bins]
    has_fail = hist.uncorrectable is not None
    if has_fail:
        counts.append(int(hist.uncorrectable))
        labels.append(f">{t}")
    return _Data(lows, highs, np.array(counts, np.int64), has_fail, tuple(labels))


def _bin_probs(law: _Law, d: _Data) -> np.ndarray:
    q = [float(law.q[lo:hi + 1].sum()) for lo, hi in zip(d.lows, d.highs)]
    if d.has_fail:
        q.append(law.fer)
    return np.array(q)


def _loglik(probs: np.ndarray, counts: np.ndarray) -> float:
    Q = probs.sum()
    if not Q > 0:
        return -1e300
    lp = np.log(np.maximum(probs, 1e-300) / Q)
    return float(np.sum(np.where(counts > 0, counts * lp, 0.0)))


def _fit_x(model: str, d: _Data, code: theory.RsCode, starts: Sequence[np.ndarray], tol: float = 1e-7,
           maxiter: int = 2000, optima: list | None = None) -> tuple[np.ndarray, float]:
    def nll(x):
        return -_loglik(_bin_probs(model_pmf(model, _from_x(model, x), code), d), d.counts)

    best = None
    for x0 in starts:
        if model == "binomial":
            r = optimize.minimize_scalar(lambda v: nll(np.array([v])), bounds=(-20.0, -0.35), method="bounded",
                                         options={"xatol": 1e-9})
            cand = (np.array([r.x]), float(r.fun))
        else:
            from phy802.telemetry._kernels import nelder_mead

            x0 = np.asarray(x0, float)
            # an explicit simplex: scipy's default (5% of each coordinate) is tiny where a coordinate is
            # near 0 (logit pb ~ 0) and lets refits stop at their start, which narrows bootstrap intervals.
            # The compiled Nelder-Mead is scipy's algorithm (same coefficients and stopping rule).
            xr, fr, _ = nelder_mead(_MODEL_ID[model], x0, _SIMPLEX_STEP[model], d.lows, d.highs, d.counts,
                                    d.has_fail, code.n, code.t, UNITS, 1e-6, tol, maxiter, maxiter * 2)
            cand = (np.asarray(xr), float(fr))
            if optima is not None:  # every start's local optimum (the profile sweeps start from each)
                optima.append(cand)
        if best is None or cand[1] < best[1]:
            best = cand
        if model == "binomial":
            break
    return best[0], -best[1]


def _starts(model: str, p_sym: float) -> list[np.ndarray]:
    p_sym = min(max(p_sym, 1e-12), 0.3)
    ser = float(-np.expm1(np.log1p(-p_sym) / UNITS))
    if model == "binomial":
        return [np.array([math.log10(p_sym)])]
    if model == "dfe":
        return [_to_x("dfe", {"ser": ser, "pb": pb}) for pb in (0.05, 0.5, 0.9)]
    out = []
    for eb in (0.05, 0.3):
        for pbg in (0.02, 0.3):
            eg = ser * 0.5
            pi_b = min(max((ser - eg) / (eb - eg), 1e-9), 0.5)
            out.append(_to_x("ge", {"e_g": eg, "e_b": eb, "p_gb": pi_b * pbg / (1 - pi_b), "p_bg": pbg}))
    return out


# ------------------------------------------------------------------------------ results


@dataclass
class ModelFit:
    """One fitted model: parameters, log-likelihood, goodness of fit, predictions with 95% intervals."""

    model: str
    params: dict
    loglik: float
    n_params: int
    expected: list[float]
    gof: dict
    predicted: dict
    interval_method: str
    note: str = ""

    @property
    def aic(self) -> float:
        return 2 * self.n_params - 2 * self.loglik

    def as_dict(self) -> dict:
        return {"model": self.model, "params": self.params, "loglik": self.loglik, "n_params": self.n_params,
                "aic": self.aic, "expected": self.expected, "gof": self.gof, "predicted": self.predicted,
                "interval_method": self.interval_method, "note": self.note}


@dataclass
class TailFit:
    """All fits of one histogram (``as_dict`` is the FIT.json document)."""

    code: theory.RsCode
    histogram: FecHistogram
    target_fer: float
    fits: dict[str, ModelFit]
    skipped: dict[str, str]
    comparison: dict
    best: str | None
    observed: dict
    settings: dict = field(default_factory=dict)
    per_lane: list = field(default_factory=list)
    baseline: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    verdict: dict = field(default_factory=dict)

    @property
    def withheld(self) -> bool:
        """True when no fitted law passed its goodness-of-fit test (or FEC is off on the port): the
        tail extrapolations are then not reported as results (:func:`judge_fits`)."""
        return bool(self.verdict) and self.verdict.get("status") != "fits"

    def as_dict(self) -> dict:
        from phy802 import __version__

        return {
            "format": "phy802.fec_tail_fit", "version": 1, "phy802_version": __version__,
            "verdict": self.verdict,
            "code": {"name": self.code.name, "n": self.code.n, "k": self.code.k, "t": self.code.t},
            "target_fer": self.target_fer, "settings": self.settings,
            "histogram": self.histogram.as_dict(), "observed": self.observed,
            "models": {k: v.as_dict() for k, v in self.fits.items()}, "skipped": self.skipped,
            "comparison": self.comparison, "best": self.best, "per_lane_binomial": self.per_lane,
            "baseline": self.baseline, "notes": self.notes,
            "channel": None if self.best is None else {"model": self.best, **self.fits[self.best].params,
                                                       "ber": self.fits[self.best].predicted["pre_fec_ber"]["value"]},
        }

    def format_text(self) -> str:
        c = self.code
        lines = [f"histogram  {self.histogram.source or '-'}: {self.observed['codewords']} codewords in "
                 f"{len(self.histogram.bins)} bins, code {c.name or 'RS'}({c.n},{c.k}) t={c.t}; "
                 f"uncorrectable {self.observed['uncorrectable'] if self.observed['uncorrectable'] is not None else 'not reported'}"]
        if self.observed.get("fer"):
            f = self.observed["fer"]
            lines.append(f"observed   FER {fmt_interval(f['value'], f['lo'], f['hi'])} (95% Clopper-Pearson)")
        lines.append(f"target     FER {self.target_fer:.0e} (margin: how far pre-FEC BER may grow, shape held)")
        lines.append("")
        if self.withheld:  # said first: the numbers below are not a result
            lines.insert(0, f"WARNING: {self.verdict['message']}")
        hdr = f"{'model':<9} {'params':<44} {'X2 p':>8} {'G2 p':>8} {'AIC':>12}"
        lines.append(hdr)
        for name, f in self.fits.items():
            ps = ", ".join(f"{k}={v:.3g}" for k, v in f.params.items())
            pv = lambda v: "   -    " if v is None else f"{v:8.2g}"
            lines.append(f"{name:<9} {ps:<44} {pv(f.gof['pearson_p'])} {pv(f.gof['g2_p'])} {f.aic:12.2f}  "
                         f"{f.gof.get('verdict', '')}")
        for name, why in self.skipped.items():
            lines.append(f"{name:<9} not fitted: {why}")
        lines.append("")
        lines.append(f"{'model':<9} {'pre-FEC BER':<34} {'FER':<34} {'post-FEC BER':<34} margin (BER x, dB SNR)")
        for name, f in self.fits.items():
            p = f.predicted
            iv = lambda r: fmt_interval(r["value"], r["lo"], r["hi"])
            if self.withheld:  # the pre-FEC BER is the histogram's mean; the tail is the model's alone
                lines.append(f"{name:<9} {iv(p['pre_fec_ber']):<34} {'withheld (no law fits)':<34} "
                             f"{'withheld':<34} withheld")
                continue
            m = p["margin_factor"]
            ms = "-" if m["value"] is None else (f"x{fmt_interval(m['value'], m['lo'], m['hi'])}"
                                                 + ("" if p["snr_margin_db"]["value"] is None
                                                    else f", {p['snr_margin_db']['value']:+.2f} dB"))
            # a law that failed (or could not take) its goodness-of-fit test while another passed: its tail is
            # shown for comparison, marked, never read as the port's result (the best is among the passing laws)
            gof = f.gof.get("verdict")
            mark = "" if gof in (None, "fits") else f"  ({gof}: not the port's result)"
            lines.append(f"{name:<9} {iv(p['pre_fec_ber']):<34} {iv(p['fer']):<34} {iv(p['post_fec_ber']):<34} {ms}"
                         f"{mark}")
        for name, f in self.fits.items():  # model notes beyond the standing "effective parameters" one
            if self.withheld:  # they speak of the withheld tail
                break
            extra = [x for x in f.note.split("; ") if x and not x.startswith("effective burst parameters")]
            if extra:
                lines.append(f"{name}: {'; '.join(extra)}")
        bl = self.baseline
        if bl:
            lines.append("")
            if bl.get("predicted_fer") is not None:
                lines.append(f"SONiC baseline: predicted FLR {bl['predicted_fer']:.3e} (log-linear fit of bins "
                             f"{','.join(map(str, bl['bins_used']))}, R^2 {bl['r2']:.4f}, extrapolated to "
                             f"{bl['extrapolated_bins'][0]}..{bl['extrapolated_bins'][-1]}; no burst model, no interval)")
            else:
                lines.append(f"SONiC baseline: predicted FLR not available ({bl.get('why')})")
            if bl.get("observed_cer") is not None:
                o, fl = bl["observed_cer"], bl["observed_flr"]
                lines.append(f"                observed CER {fmt_interval(o['value'], o['lo'], o['hi'])}, FLR = CER x "
                             f"(1 + {bl['interleave']} x {bl['mfc']})/{bl['mfc']} = "
                             f"{fmt_interval(fl['value'], fl['lo'], fl['hi'])}")
        lines.append("")
        for k, v in self.comparison.items():
            lines.append(f"{k}: LR {v['lr']:.3g}, p = {v['p_value']:.3g} ({v['reference']})")
        if self.per_lane:
            lines.append("")
            lines.append("per lane (binomial fit of each lane's bins):")
            for r in self.per_lane:
                if not r["codewords"]:
                    lines.append(f"  lane {r['lane']:>2}: no codewords")
                    continue
                b, f = r["pre_fec_ber"], r["fer"]
                lines.append(f"  lane {r['lane']:>2}: {r['codewords']} codewords, BER "
                             f"{fmt_interval(b['value'], b['lo'], b['hi'])}, FER {f['value']:.2e}, G2 p {_f(r['g2_p'], '.2g')}")
        for note in self.notes:
            if note != self.verdict.get("message"):  # already the first line
                lines.append(f"note: {note}")
        if self.best:
            lines.append(f"best (AIC{' among the laws that fit' if not self.withheld else ''}): {self.best}; intervals: "
                         + "; ".join(f"{k} {v.interval_method}" for k, v in self.fits.items()))
        return "\n".join(lines)


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _gof(counts: np.ndarray, probs: np.ndarray, n_params: int, min_expected: float = 5.0) -> tuple[dict, list]:
    N = counts.sum()
    E = N * probs / probs.sum()
    groups_o, groups_e = [], []
    o_acc = e_acc = 0.0
    for o, e in zip(counts, E):
        o_acc += o
        e_acc += e
        if e_acc >= min_expected:
            groups_o.append(o_acc)
            groups_e.append(e_acc)
            o_acc = e_acc = 0.0
    if e_acc > 0 or o_acc > 0:
        if groups_o:
            groups_o[-1] += o_acc
            groups_e[-1] += e_acc
        else:
            groups_o.append(o_acc)
            groups_e.append(e_acc)
    O, Ex = np.array(groups_o), np.array(groups_e)
    x2 = float(np.sum((O - Ex) ** 2 / np.maximum(Ex, 1e-300)))
    g2 = float(2.0 * np.sum(np.where(O > 0, O * np.log(np.maximum(O, 1e-300) / np.maximum(Ex, 1e-300)), 0.0)))
    df = len(O) - 1 - n_params
    return ({"pooled_groups": len(O), "df": df, "pearson_x2": x2, "g2": g2,
             "pearson_p": float(_st.chi2.sf(x2, df)) if df >= 1 else None,
             "g2_p": float(_st.chi2.sf(g2, df)) if df >= 1 else None,
             "min_expected": min_expected}, [float(v) for v in E])


def _predict(model: str, params: dict, code: theory.RsCode, target: float) -> dict:
    law = model_pmf(model, params, code)
    out = {"pre_fec_ber": law.ber, "fer": law.fer, "post_fec_ber": law.post_fec_ber}
    s = _margin(model, params, code, target)
    out["margin_factor"] = s
    out["ber_at_target"] = None if s is None else law.ber * s
    out["margin_db"] = None if s is None else 10 * math.log10(s)
    snr = None
    if s is not None and 0 < law.ber < 0.5 and 0 < law.ber * s < 0.5:
        try:
            snr = theory.snr_db_for_ber(law.ber) - theory.snr_db_for_ber(law.ber * s)
        except ValueError:
            snr = None
    out["snr_margin_db"] = snr
    return out


def _margin(model: str, params: dict, code: theory.RsCode, target: float) -> float | None:
    if model in _MODEL_ID:
        from phy802.telemetry._kernels import margin_factor

        v = float(margin_factor(_MODEL_ID[model], _par_vec(model, params), code.n, code.t, UNITS, target))
        return None if math.isnan(v) else v
    return _margin_reference(model, params, code, target)


def _margin_reference(model: str, params: dict, code: theory.RsCode, target: float) -> float | None:
    def g(ls):
        p = scaled_params(model, params, 10.0**ls)
        if p is None:
            return math.inf
        f = model_pmf(model, p, code).fer
        return (math.log(f) if f > 0 else -800.0) - math.log(target)

    lo, hi = -12.0, 24.0
    if not math.isfinite(g(hi)):  # the largest scale the model allows (probabilities < 1), by bisection
        a, b = lo, hi
        for _ in range(40):
            mid = 0.5 * (a + b)
            a, b = (mid, b) if math.isfinite(g(mid)) else (a, mid)
        hi = a
    try:
        glo, ghi = g(lo), g(hi)
    except (ValueError, FloatingPointError):
        return None
    if not (glo < 0 < ghi):
        return None
    return 10.0 ** float(optimize.brentq(g, lo, hi, xtol=1e-6))


_PRED_KEYS = ("pre_fec_ber", "fer", "post_fec_ber", "margin_factor", "ber_at_target", "margin_db", "snr_margin_db")


def _interval(v, lo, hi) -> dict:
    return {"value": v, "lo": lo, "hi": hi}


def _profile_binomial(d: _Data, code: theory.RsCode, x_hat: float, ll_hat: float, target: float) -> dict:
    def ll(v):
        return _loglik(_bin_probs(model_pmf("binomial", {"p_symbol": 10.0**v}, code), d), d.counts)

    cut = ll_hat - _CHI2_95 / 2

    def root(a, b):
        fa, fb = ll(a) - cut, ll(b) - cut
        if fa * fb > 0:
            return None
        return float(optimize.brentq(lambda v: ll(v) - cut, a, b, xtol=1e-9))

    x_lo = root(-20.0, x_hat) if x_hat > -19.9 else None
    x_hi = root(x_hat, -0.35)
    p_lo = 0.0 if x_lo is None else 10.0**x_lo
    p_hi = 0.5 if x_hi is None else 10.0**x_hi
    ends = [_predict("binomial", {"p_symbol": p}, code, target) if p > 0 else None for p in (p_lo, p_hi)]
    centre = _predict("binomial", {"p_symbol": 10.0**x_hat}, code, target)
    out = {}
    for k in _PRED_KEYS:
        a = ends[0][k] if ends[0] is not None else None  # at the lower end of p
        b = ends[1][k] if ends[1] is not None else None  # at the upper end of p
        if k in ("pre_fec_ber", "fer", "post_fec_ber"):  # increasing in p; p = 0 gives 0
            out[k] = _interval(centre[k], 0.0 if ends[0] is None else a, b)
        elif k == "ber_at_target":  # the binomial's BER at the target does not depend on p
            out[k] = _interval(centre[k], centre[k], centre[k])
        else:  # margins decrease in p; p -> 0 leaves the upper end open (None)
            out[k] = _interval(centre[k], b, a)
    return out


#: how GE's intervals are made: "region" (the projected chi2_4 likelihood region, the default) or
#: "bootstrap" (the percentile bootstrap of dfe, the method before; kept for benchmarks/bench_tail.py)
GE_INTERVALS = "region"

#: a local optimum of the point fit also starts the profile sweeps when its deviance against the MLE is
#: at most this (a mode that far down cannot hold points of the 95% set only through a long ridge)
_MODE_DEV = 2.0 * float(_st.chi2.ppf(0.95, 4))


def _profile_burst(model: str, d: _Data, code: theory.RsCode, x_hat: np.ndarray, ll_hat: float,
                   optima: list, target: float, raw_starts: Sequence[np.ndarray] = ()) -> tuple[dict, str]:
    """95% intervals of a burst model's FER and pre-FEC BER: the range of each over the joint likelihood
    region ``2 (ll_hat - ll(x)) <= chi2_k(0.95)`` (``k`` = the model's parameters), its ends found by a
    Lagrangian sweep (:func:`phy802.telemetry._kernels.profile_end`) started from the MLE and from every
    other local optimum of the point fit within :data:`_MODE_DEV`. The post-FEC BER's and the margin's
    intervals are their values at the parameters of the FER interval's ends (upper FER end -> lower
    margin), widened to hold the point value: an approximation (they are not profiled themselves; the
    post-FEC BER is nearly proportional to the FER, and each evaluation of the margin is a root search)."""
    from phy802.telemetry._kernels import profile_end

    nll_hat = -ll_hat
    # the joint 95% likelihood region of all the model's parameters (chi2 with n_params df), projected
    # onto each prediction: every prediction's interval then holds with >= 95% whenever the region does.
    # The 1-df profile (chi2_1 = 3.84) covered 34/40 on GE (e_b 0.02, 1e7 codewords): with four weakly
    # identified parameters the FER's profile deviance is far from chi2_1; the region's was 39/40.
    crit = float(_st.chi2.ppf(0.95, _N_PARAMS[model]))

    def lfer(x):
        v = model_pmf(model, _from_x(model, x), code).fer
        return math.log(v) if v > 0 else -700.0

    rows = [np.asarray(x_hat, float)]
    seen = [lfer(rows[0])]
    for x, f in sorted(optima, key=lambda c: c[1]):
        x = np.asarray(x, float)
        # an optimum predicting the FER of a kept one (within 10%) is taken as the same mode: on a flat
        # likelihood (a binomial-like port) the starts end far apart in x with one prediction; GE's two
        # modes (long mild / short intense bursts) predict FERs ~1.5x apart
        lf = lfer(x)
        if 2.0 * (f - nll_hat) <= _MODE_DEV and all(abs(lf - v) > 0.1 for v in seen):
            rows.append(x)
            seen.append(lf)
    # the point fit's raw starts as well: under the multiplier the GE likelihood's ridge towards long mild
    # bursts is a branch that Nelder-Mead warm-started at a short-intense optimum never reaches (seen on
    # a simulated histogram whose true FER lay on it, inside the region, outside the optima's sweep)
    n_opt = len(rows)
    rows.extend(np.asarray(x, float) for x in raw_starts)
    starts = np.array(rows)
    params = _from_x(model, x_hat)
    centre = _predict(model, params, code, target)
    out: dict = {}
    fer_ends = []
    opened = []
    for kind, key in enumerate(("fer", "pre_fec_ber")):
        ends = []
        # the pre-FEC BER is the well-identified quantity (the histogram's mean): the optima suffice
        rows_k = starts if kind == 0 else starts[:n_opt]
        for sign in (-1.0, 1.0):
            lg, xe, closed, _ = profile_end(_MODEL_ID[model], rows_k, nll_hat, kind, sign, crit,
                                            _PROFILE_STEP, d.lows, d.highs, d.counts, d.has_fail, code.n, code.t,
                                            UNITS, 20)
            v = math.exp(lg) if lg > -690.0 else 0.0
            ends.append(v)
            if not closed:
                opened.append(f"{key} {'upper' if sign > 0 else 'lower'}")
            if kind == 0:
                fer_ends.append(np.asarray(xe, float))
        c = centre[key]
        out[key] = _interval(c, min(ends[0], c), max(ends[1], c))
    # post-FEC BER, margin and its derived values at the parameters of the FER ends (high FER -> small margin)
    hi_fer, lo_fer = (_predict(model, _from_x(model, x), code, target) for x in fer_ends[::-1])
    for key in ("post_fec_ber", "margin_factor", "ber_at_target", "margin_db", "snr_margin_db"):
        c = centre[key]
        a, b = (hi_fer[key], lo_fer[key]) if key != "post_fec_ber" else (lo_fer[key], hi_fer[key])
        if c is None:
            out[key] = _interval(None, None, None)
        else:  # an end without a value (a margin past the shape-held range) stays open (None)
            lo = None if a is None else min(a, b if b is not None else a, c)
            hi = None if b is None else max(a if a is not None else b, b, c)
            out[key] = _interval(c, lo, hi)
    method = (f"likelihood region (2 dLL <= chi2_{_N_PARAMS[model]}(0.95) = {crit:.2f}, projected; Lagrangian "
              f"sweep from {n_opt} local optima and {len(rows) - n_opt} starts) for FER and pre-FEC BER; post-FEC BER and margin at the "
              f"FER ends' parameters")
    if opened:
        method += f"; open ends at the parameter range: {', '.join(opened)}"
    return out, method


#: initial Nelder-Mead step of the profile sweeps (warm starts: smaller than the point fit's)
_PROFILE_STEP = 0.3


#: bootstrap refits of dfe by Fisher scoring where the fit is interior (False: Nelder-Mead only, the reference)
REFIT_FISHER = True


def _interior(model: str, x: np.ndarray, pad: float = 0.05) -> bool:
    """``x`` strictly inside the transform's clip ranges (:func:`_from_x`): there the likelihood is
    smooth in every coordinate and a bootstrap refit may use Fisher scoring (a clipped coordinate is
    flat, which only Nelder-Mead explores)."""
    if model == "dfe":
        return bool(-20 + pad < x[0] < -0.5 - pad and -20 < x[1] < math.log(0.9999 / 0.0001) - pad)
    return bool(np.all(x > -20 + pad) and np.all(x < -pad) and abs(x[0] - x[1]) > pad)


def _snr_db_for_ber_vec(ber: np.ndarray) -> np.ndarray:
    """:func:`phy802.theory.snr_db_for_ber` for an array (the same PAM4 AWGN law, log_ndtr form, inverted
    by bisection on [-40, 120] dB to 1e-11 dB): one scalar root search per bootstrap replicate was a
    third of a port's fit time."""
    from scipy import special

    ber = np.asarray(ber, float)
    if ber.size == 0:
        return ber.copy()
    lt = np.log(ber)

    def f(x):
        d = 1.0 / theory.sigma_from_snr_db(x)
        l1 = special.log_ndtr(-d)
        r3 = np.exp(special.log_ndtr(-3 * d) - l1)
        r5 = np.exp(special.log_ndtr(-5 * d) - l1)
        return l1 + np.log((3.0 + 2.0 * r3 - r5) / 4.0) - lt  # decreasing in x

    lo = np.full(ber.shape, -40.0)
    hi = np.full(ber.shape, 120.0)
    for _ in range(54):
        mid = 0.5 * (lo + hi)
        up = f(mid) > 0  # BER at mid still above the target: the root is higher
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    return 0.5 * (lo + hi)


#: Nelder-Mead tolerances of the bootstrap refits (x in log10/logit units, f in nll): a refit's
#: predictions then move by < 0.1%, far inside the spread of the replicates (the point fit keeps 1e-6/1e-7)
_BOOT_XTOL = 1e-4
_BOOT_FTOL = 1e-5


def _bootstrap(model: str, d: _Data, code: theory.RsCode, x_hat: np.ndarray, target: float, reps: int,
               rng: np.random.Generator) -> tuple[dict, int]:
    params = _from_x(model, x_hat)
    centre = _predict(model, params, code, target)
    probs = _bin_probs(model_pmf(model, params, code), d)
    probs = probs / probs.sum()
    N = d.total
    from phy802.telemetry._kernels import bootstrap_refits

    counts = rng.multinomial(N, probs, size=reps).astype(np.int64)
    # Fisher scoring only for dfe: on ge it stopped short in flat directions and narrowed the upper FER
    # end (coverage 9/20 against Nelder-Mead's 16/20 on a simulated GE channel, benchmarks/bench_tail.py)
    use_lm = REFIT_FISHER and model == "dfe" and _interior(model, np.asarray(x_hat, float))
    res = bootstrap_refits(_MODEL_ID[model], counts, np.asarray(x_hat, float), _SIMPLEX_STEP[model], d.lows,
                           d.highs, d.has_fail, code.n, code.t, UNITS, float(target), _BOOT_XTOL, _BOOT_FTOL, 1000, use_lm)
    ok = int(np.sum(res[:, 4]))  # replicates refitted by Fisher scoring (the rest by Nelder-Mead)
    draws = {"pre_fec_ber": res[:, 0], "fer": res[:, 1], "post_fec_ber": res[:, 2]}
    mf = res[:, 3]
    good = ~np.isnan(mf)
    draws["margin_factor"] = mf[good]
    draws["ber_at_target"] = (res[:, 0] * mf)[good]
    draws["margin_db"] = 10 * np.log10(mf[good])
    b, bm = res[good, 0], res[good, 0] * mf[good]
    ok_snr = (b > 0) & (b < 0.5) & (bm > 0) & (bm < 0.5)
    draws["snr_margin_db"] = _snr_db_for_ber_vec(b[ok_snr]) - _snr_db_for_ber_vec(bm[ok_snr])
    out = {}
    for k in _PRED_KEYS:
        v = np.array(draws[k], float)
        if centre[k] is None or v.size < max(10, reps // 2):
            out[k] = _interval(centre[k], None, None)
        else:
            out[k] = _interval(centre[k], float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5)))
    return out, ok


# ------------------------------------------------------------------------------ SONiC's baseline

#: SONiC's FLR conversion: MFC = 8 for RS(544,514) (telemetry_notes, SONiC "port_fec_flr")
SONIC_MFC = 8


def sonic_baseline(hist: FecHistogram, code: theory.RsCode, interleave: int = 2) -> dict:
    """What a SONiC switch shows today for this histogram (telemetry_notes.md, "port_fec_flr").

    * ``predicted``: a least-squares line through ``log10(c_i / N)`` over the non-zero single-count
      bins ``i = 1..t`` (``N`` = all codewords), extrapolated to ``i = t+1 .. t+5`` (16..20 for KP4)
      and summed: a codeword error ratio with no burst structure and no interval; ``r2`` of the line.
      Ranged bins (``4-7``) are not used (SONiC's bins are single counts).
    * ``observed``: ``CER = uncorrectable / N`` (Clopper-Pearson 95%) and the observed frame loss
      ratio ``FLR = CER x (1 + X x MFC) / MFC`` with ``MFC = 8`` and ``X = interleave`` (codewords
      interleaved per frame: 2 at 200G/400G, 4 at 800G/1.6T).
    """
    from phy802.stats import rate

    if interleave < 1:
        raise ValueError(f"interleave must be >= 1, got {interleave}")
    N = hist.total
    out: dict = {"method": "SONiC port_fec_flr: log10-linear fit of bins 1..t, extrapolated to t+1..t+5",
                 "interleave": int(interleave), "mfc": SONIC_MFC,
                 "flr_factor": (1 + interleave * SONIC_MFC) / SONIC_MFC}
    pts = [(b.low, b.count) for b in hist.bins if b.low == b.high and 1 <= b.low <= code.t and b.count > 0]
    out["bins_used"] = [i for i, _ in pts]
    if N == 0 or len(pts) < 2:
        out.update(predicted_fer=None, predicted_flr=None, r2=None, slope=None,
                   why=f"needs >= 2 non-zero single-count bins in 1..{code.t}, has {len(pts)}")
    else:
        x = np.array([i for i, _ in pts], float)
        y = np.log10(np.array([c for _, c in pts], float) / N)
        b, a = np.polyfit(x, y, 1)
        resid = y - (a + b * x)
        ss = float(np.sum((y - y.mean()) ** 2))
        r2 = 1.0 - float(np.sum(resid ** 2)) / ss if ss > 0 else 1.0
        ext = np.arange(code.t + 1, code.t + 6, dtype=float)
        pred = float(np.sum(10.0 ** (a + b * ext)))
        out.update(predicted_fer=pred, predicted_flr=pred, r2=r2, slope=float(b), intercept=float(a),
                   extrapolated_bins=[int(v) for v in ext])
    if hist.uncorrectable is None or N == 0:
        out["observed_cer"] = None
        out["observed_flr"] = None
    else:
        r = rate(int(hist.uncorrectable), N).as_dict()
        f = out["flr_factor"]
        out["observed_cer"] = r
        out["observed_flr"] = {k: (v * f if k in ("value", "lo", "hi") and v is not None else v) for k, v in r.items()}
    return out


def fmt_interval(v, lo, hi, digits: int = 3) -> str:
    """``v [lo,hi]`` with the same significant digits for all three, more while the ends print like the
    value but differ from it (never ``1.57e-04 [1.6e-04,1.6e-04]``)."""
    if v is None:
        return "-"
    d = digits
    while True:
        spec = f".{d - 1}e"
        s = [format(v, spec), _f(lo, spec), _f(hi, spec)]
        clash = any(x is not None and x != v and format(x, spec) == s[0] for x in (lo, hi))
        if not clash or d >= 8:
            return f"{s[0]} [{s[1]},{s[2]}]"
        d += 1


def estimate_cpu_seconds(hist: FecHistogram, models: Sequence[str] = MODELS, bootstrap: int = 200) -> float:
    """A rough upper estimate of :func:`fit_histogram`'s CPU time (for refusing a job up front)."""
    per_rep = {"binomial": 0.0, "dfe": _COST["dfe"], "ge": 0.0}  # ge: likelihood region, no bootstrap
    fixed = 0.05 + 0.2 * ("dfe" in models) + _COST["ge_fixed"] * ("ge" in models)
    lanes = (hist.n_lanes or 0) * 0.02
    return fixed + lanes + bootstrap * sum(per_rep.get(m, 0.0) for m in models)


#: CPU seconds per dfe bootstrap replicate (Fisher scoring / Nelder-Mead refits) and of GE's point fit and
#: region sweeps: rounded-up measurements of benchmarks/bench_tail.py, used only to refuse work too big up front
_COST = {"dfe": 0.008, "ge_fixed": 1.5}


# ------------------------------------------------------------------------------ entry point


def _checked_fit_args(code, models: Sequence[str], target_fer: float, bootstrap: int,
                      gof_level: float) -> theory.RsCode:
    """The code object of ``code``, after refusing any argument of :func:`fit_histogram` out of range."""
    if isinstance(code, str):
        if code not in CODES:
            raise ValueError(f"unknown code {code!r} (choose from {', '.join(CODES)})")
        code = CODES[code]
    if not 0 < target_fer < 1:
        raise ValueError(f"target_fer must be in (0, 1), got {target_fer}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0, got {bootstrap}")
    if not 0 < gof_level < 1:
        raise ValueError(f"gof_level must be in (0, 1), got {gof_level}")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"unknown model {m!r} (choose from {', '.join(MODELS)})")
    return code


def _observed(hist: FecHistogram, d: _Data) -> dict:
    """What the histogram itself says: codewords, nonzero bins, and the observed FER with its interval."""
    from phy802.stats import rate

    observed = {"codewords": d.total, "uncorrectable": hist.uncorrectable,
                "nonzero_bins": int(np.count_nonzero(d.counts)), "fer": None}
    if hist.uncorrectable is not None:
        observed["fer"] = rate(int(hist.uncorrectable), d.total).as_dict()
    return observed


def _fit_model(m: str, d: _Data, code: theory.RsCode, starts, target_fer: float, bootstrap: int,
               rng: np.random.Generator, progress) -> ModelFit:
    """One law fitted to ``d``: the point fit, its goodness of fit, and its predictions with their
    intervals (profile likelihood, likelihood region or parametric bootstrap, as the model needs)."""
    optima: list = []
    x_hat, ll_hat = _fit_x(m, d, code, starts, optima=optima)
    params = _from_x(m, x_hat)
    law = model_pmf(m, params, code)
    gof, expected = _gof(d.counts, _bin_probs(law, d), _N_PARAMS[m])
    if m == "binomial":
        pred = _profile_binomial(d, code, float(x_hat[0]), ll_hat, target_fer)
        method = "profile likelihood (2 dLL <= chi2_1(0.95) = 3.84)"
        note = ""
    elif m == "ge" and GE_INTERVALS == "region":
        # profile likelihood, not a bootstrap: the GE likelihood has two modes (long mild / short intense
        # bursts) and replicates drawn at one never visit the other; the percentile interval covered
        # 32/40 (benchmarks/bench_tail.py), the profile set spans both modes.
        if progress:
            progress(f"profile likelihood {m}")
        pred, method = _profile_burst(m, d, code, np.asarray(x_hat, float), ll_hat, optima, target_fer, starts)
        note = "effective burst parameters (codeword idealised as consecutive symbols on one lane)"
    else:
        if progress and bootstrap:
            progress(f"bootstrap {m} ({bootstrap} replicates)")
        if bootstrap:
            pred, ok = _bootstrap(m, d, code, np.asarray(x_hat), target_fer, bootstrap, rng)
            method = (f"parametric bootstrap, {bootstrap} replicates, percentile (refits: {ok} Fisher "
                      f"scoring, {bootstrap - ok} Nelder-Mead)")
        else:
            c = _predict(m, params, code, target_fer)
            pred = {k: _interval(c[k], None, None) for k in _PRED_KEYS}
            method = "none (bootstrap = 0)"
        note = "effective burst parameters (codeword idealised as consecutive symbols on one lane)"
    if m == "ge":
        note = "; ".join(filter(None, [note, _ge_margin_note(params, code, target_fer, pred)]))
    return ModelFit(m, params, ll_hat, _N_PARAMS[m], expected, gof, pred, method, note)


def _against_binomial(fits: dict) -> dict:
    """Likelihood-ratio tests of the burst laws against the binomial (the nested simpler law)."""
    comparison = {}
    if "binomial" in fits:
        l0 = fits["binomial"].loglik
        if "dfe" in fits:
            lr = max(0.0, 2 * (fits["dfe"].loglik - l0))
            comparison["dfe_vs_binomial"] = {"lr": lr, "p_value": float(0.5 * _st.chi2.sf(lr, 1)) if lr > 0 else 1.0,
                                             "reference": "0.5 chi2_1 (boundary pb = 0)"}
        if "ge" in fits:
            lr = max(0.0, 2 * (fits["ge"].loglik - l0))
            comparison["ge_vs_binomial"] = {"lr": lr, "p_value": float(_st.chi2.sf(lr, 3)),
                                            "reference": "chi2_3 (approximate: boundary, unidentified under H0)"}
    return comparison


def fit_histogram(
    hist: FecHistogram,
    code: theory.RsCode | str = "kp4",
    *,
    models: Sequence[str] = MODELS,
    target_fer: float = DEFAULT_TARGET_FER,
    bootstrap: int = 200,
    seed: int | np.random.Generator = 1,
    progress: Callable[[str], None] | None = None,
    interleave: int = 2,
    gof_level: float = DEFAULT_GOF_LEVEL,
) -> TailFit:
    """Fit ``models`` to ``hist`` and extrapolate (see the module docstring); ``interleave``: the
    codeword interleave X of SONiC's FLR baseline (:func:`sonic_baseline`); ``gof_level``: a law
    whose G2 goodness-of-fit p-value is below it is rejected (:func:`judge_fits`), and when no law
    passes, the fit's ``verdict`` says so and its tail is withheld."""
    code = _checked_fit_args(code, models, target_fer, bootstrap, gof_level)
    from phy802._rng import as_generator

    rng = as_generator(seed)
    d = _data(hist, code.t)
    N = d.total
    if N == 0:
        raise ValueError(f"{hist.source or 'histogram'}: no codewords counted (every bin-val is 0)")
    observed = _observed(hist, d)
    # moment start for p: mean corrected symbols per codeword (bins at their midpoints)
    mids = (d.lows + d.highs) / 2.0
    nb = len(d.lows)
    mean_w = float(np.sum(d.counts[:nb] * mids) / max(d.counts[:nb].sum(), 1))
    p0 = max(mean_w / code.n, 0.1 / (N * code.n))
    fits: dict[str, ModelFit] = {}
    skipped: dict[str, str] = {}
    n_cells = len(d.counts)
    for m in models:
        if n_cells < _MIN_BINS[m]:
            skipped[m] = f"needs at least {_MIN_BINS[m]} bins, the histogram has {n_cells}"
            continue
        if m != "binomial" and observed["nonzero_bins"] < 2:
            skipped[m] = "all codewords are in one bin: burst parameters are not identifiable"
            continue
        if progress:
            progress(f"fitting {m}")
        starts = _starts(m, p0 if "binomial" not in fits else fits["binomial"].params["p_symbol"])
        fits[m] = _fit_model(m, d, code, starts, target_fer, bootstrap, rng, progress)
    comparison = _against_binomial(fits)
    verdict = judge_fits(fits, skipped, gof_level)
    # the lowest AIC among the laws that pass their test; when none passes, among all (withheld anyway)
    pool = verdict["passing"] or list(fits)
    best = min(pool, key=lambda k: fits[k].aic) if fits else None
    per_lane = _per_lane(hist, code, target_fer)
    notes = []
    if hist.n_lanes and not per_lane:
        missing = [b.label() for b in hist.bins if b.per_lane is None]
        notes.append(f"per-lane counts in only {len(hist.bins) - len(missing)} of {len(hist.bins)} bins "
                     f"(none for {', '.join(missing[:6])}): no per-lane fit")
    if verdict["status"] != "fits":
        notes.insert(0, verdict["message"])  # notes read by tools say it too, first
    settings = {"models": list(models), "bootstrap": bootstrap, "gof_level": float(gof_level),
                "seed": seed if isinstance(seed, int) else None, "units_per_rs_symbol": UNITS}
    return TailFit(code, hist, float(target_fer), fits, skipped, comparison, best, observed, settings, per_lane,
                   sonic_baseline(hist, code, interleave), notes, verdict)


#: what :func:`judge_fits` tests with (stated in every verdict)
GOF_TEST = "G2 likelihood ratio against the saturated multinomial, bins pooled to >= 5 expected codewords"


def judge_fits(fits: dict, skipped: dict, level: float) -> dict:
    """Which fitted laws the histogram supports: a law *fits* when its G2 goodness-of-fit p-value is at
    least ``level``, is *rejected* below it, and is *untested* when pooling leaves no degree of freedom
    (too few bins expect >= 5 codewords to test that many parameters). Sets each fit's
    ``gof["verdict"]``; returns ``{"status": "fits" | "no_fit", "level", "test", "passing", "rejected",
    "untested", "message"}``. With no law passing, every extrapolation is a property of a model the
    data do not support (or cannot check), so the caller withholds the tail and says so first."""
    passing, rejected, untested = [], {}, {}
    for m, f in fits.items():
        p = f.gof.get("g2_p")
        if p is None:
            untested[m] = f.gof.get("df")
            f.gof["verdict"] = "untested"
        elif p >= level:
            passing.append(m)
            f.gof["verdict"] = "fits"
        else:
            rejected[m] = p
            f.gof["verdict"] = "rejected"
    msg = ""
    if not passing:
        why = [f"{m} G2 p {p:.2g}" for m, p in rejected.items()]
        why += [f"{m} untested ({df} df after pooling)" for m, df in untested.items()]
        why += [f"{m} not fitted" for m in skipped]
        msg = (f"no law fits this histogram at the {level:g} level ({'; '.join(why) or 'no law fitted'}): "
               "its FER, post-FEC BER and margin extrapolations are withheld (each is a property of a model the "
               "counts do not support); collect more codewords or finer bins")
    return {"status": "fits" if passing else "no_fit", "level": float(level), "test": GOF_TEST,
            "passing": passing, "rejected": rejected, "untested": sorted(untested), "message": msg}


def mark_fec_off(fit: TailFit, mode: str) -> None:
    """A port whose active FEC mode is off (ethtool ``"active": ["None"]``): no RS decoder counted its
    bins, so its tail is withheld like a fit that fails (the verdict says why first)."""
    old = fit.verdict.get("message")
    fit.verdict = {**fit.verdict, "status": "fec_off", "fec_mode": mode,
                   "message": f"FEC is off on this port (active FEC mode {mode!r}): no RS decoder counted these "
                              "bins, so no FER, post-FEC BER or margin is reported for it"}
    fit.notes[:] = [fit.verdict["message"]] + [n for n in fit.notes if n != old]


def code_for_active_fec(mode: str | None) -> str | None:
    """The one code (a :data:`CODES` key) the active FEC ``mode`` names, or None when it names none
    or several (``RS`` runs kp4 or kr4; the name does not say which)."""
    hit = [c for c, modes in FEC_ACTIVE_FOR_CODE.items() if mode is not None and mode.lower() in modes]
    return hit[0] if len(hit) == 1 else None


def fec_mode_mismatch(mode: str | None, code: str) -> str:
    """Why the active FEC ``mode`` of a port is not the ``code`` fitted to its bins (``""`` when it is, when
    the port reports no mode, when FEC is off -- :func:`mark_fec_off` -- or for a name we do not know)."""
    if mode is None or mode.lower() in FEC_OFF_MODES:
        return ""
    m = mode.lower()
    c = CODES[code]
    fitted = f"the {code} RS({c.n},{c.k}) t={c.t} fitted"
    if m in _FEC_OTHER_MODES:
        return (f"the port's active FEC is {mode!r} (Clause 74 FC-FEC, a Fire code), not {fitted}: its counters are "
                "not RS symbol-error bins, so no FER, post-FEC BER or margin is reported for it")
    if m in FEC_ACTIVE_FOR_CODE[code] or not any(m in v for v in FEC_ACTIVE_FOR_CODE.values()):
        return ""
    right = [k for k, v in FEC_ACTIVE_FOR_CODE.items() if m in v]
    codes = " or ".join(f"RS({CODES[k].n},{CODES[k].k})" for k in right)
    return (f"the port's active FEC is {mode!r} ({codes}), not {fitted}: its bins count another decoder's "
            f"corrections, so no FER, post-FEC BER or margin is reported for it; fit it with "
            f"{' or '.join('--code ' + k for k in right)}")


def mark_fec_mismatch(fit: TailFit, mode: str, why: str) -> None:
    """A port whose active FEC mode is not the fitted code (``why``: :func:`fec_mode_mismatch`): its tail is
    withheld like a fit that fails, the reason first."""
    old = fit.verdict.get("message")
    fit.verdict = {**fit.verdict, "status": "fec_mismatch", "fec_mode": mode, "message": why}
    fit.notes[:] = [why] + [n for n in fit.notes if n != old]


def _ge_margin_note(params: dict, code: theory.RsCode, target: float, pred: dict) -> str:
    """Why a GE margin is missing or bounded: the error probabilities scale with the shape held only up
    to ``e_b s = 1`` (:func:`scaled_params`); ``e_b`` at its boundary 1 leaves no room above x1."""
    eb = float(params["e_b"])
    s_max = 1.0 / eb
    out = []
    if eb >= 1.0 - 1e-9:
        out.append("e_b = 1 (the boundary of its range: every PAM4 symbol of the bad state is wrong), so the "
                   "error shape cannot be scaled up; the margin is only defined below x1")
    if pred["margin_factor"]["value"] is None and s_max > 1.0 + 1e-9:
        law = model_pmf("ge", {**params, "e_g": params["e_g"] * s_max, "e_b": 1.0}, code)
        if law.fer < target:
            out.append(f"margin > x{s_max:.3g} (at that scale e_b reaches 1, the end of the shape-held range, and "
                       f"FER is still {law.fer:.2e} < target {target:.0e}); not reported")
    if pred["margin_factor"]["value"] is not None and pred["margin_factor"]["hi"] is not None \
            and pred["margin_factor"]["hi"] >= s_max * (1 - 1e-6):
        out.append(f"the margin's upper end is bounded by x{s_max:.3g} (e_b reaches 1)")
    return "; ".join(out)


def _per_lane(hist: FecHistogram, code: theory.RsCode, target: float) -> list[dict]:
    """Binomial fit per lane when every bin carries ``bin-val-per-lane`` (the lanes' own histograms;
    no per-lane uncorrectable count, so each lane's fit is conditioned on its reported bins)."""
    L = hist.n_lanes
    if not L or any(b.per_lane is None for b in hist.bins) or len(hist.bins) < 2:
        return []
    from phy802.telemetry.bins import FecBin

    out = []
    for j in range(L):
        hj = FecHistogram(tuple(FecBin(b.low, b.high, b.per_lane[j]) for b in hist.bins), None, None, None,
                          hist.t, f"{hist.source} lane {j}")
        if hj.total == 0:
            out.append({"lane": j, "codewords": 0})
            continue
        dj = _data(hj, code.t)
        x, ll = _fit_x("binomial", dj, code, _starts("binomial", 1e-6))
        pred = _profile_binomial(dj, code, float(x[0]), ll, target)
        gof, _ = _gof(dj.counts, _bin_probs(model_pmf("binomial", _from_x("binomial", x), code), dj), 1)
        out.append({"lane": j, "codewords": hj.total, "pre_fec_ber": pred["pre_fec_ber"], "fer": pred["fer"],
                    "margin_factor": pred["margin_factor"], "g2_p": gof["g2_p"]})
    return out


# ------------------------------------------------------------------------------ helpers


def sample_histogram(model: str, params: dict, code: theory.RsCode | str, codewords: int,
                     rng: np.random.Generator, edges=None, source: str = "phy802 sample") -> FecHistogram:
    """A histogram of ``codewords`` drawn (multinomial) from the model's exact codeword law."""
    code = CODES[code] if isinstance(code, str) else code
    law = model_pmf(model, params, code)
    probs = np.append(law.q, law.fer)
    probs = np.clip(probs, 0, None)
    probs /= probs.sum()
    c = rng.multinomial(int(codewords), probs)
    return FecHistogram.from_counts(c[:-1], code.t, edges, uncorrectable=int(c[-1]), source=source)


#: the largest FIT.json read (bytes): a switch's fits with per-lane rows are a few MB
MAX_FIT_BYTES = 64 << 20


def read_fit(path: str | os.PathLike) -> dict:
    """Read a FIT.json written by ``phy802 fec tail --out`` (checked for format and fields): a regular
    file of at most :data:`MAX_FIT_BYTES` (a FIFO would block until someone writes it, a device never ends)."""
    from phy802.runtime.inputs import read_input_text
    from phy802.telemetry.parsers import _load_json

    name = os.fspath(path)
    obj = _load_json(read_input_text(name, MAX_FIT_BYTES, what="fit file (from 'phy802 fec tail --out')"), name)
    if not isinstance(obj, dict) or obj.get("format") != "phy802.fec_tail_fit":
        raise ValueError(f"{name}: field 'format' must be 'phy802.fec_tail_fit' (a file from 'phy802 fec tail --out')")
    if not isinstance(obj.get("models"), dict):
        raise ValueError(f"{name}: field 'models' is missing")
    return obj


def generator_channel(fit: dict, model: str | None = None, where: str = "FIT.json") -> dict:
    """Trace-generator settings ``{"ber", "burst_pb", "model", "params"}`` for a fitted model.

    ``binomial`` -> independent line bit errors at the fitted BER (exact for that model).
    ``dfe`` -> the generator's PCS-lane DFE chain (bursts along a lane's *bits*) at the fitted
    BER with ``burst_pb = (1 + pb) / 2``: a burst of L PAM4 symbols covers about L/5 RS symbols, a
    burst of L' lane bits about L'/10, so doubling the mean burst length keeps the RS-symbol span
    (an approximation; the generator's lane interleave differs from the fit's idealisation).
    ``ge`` has no generator counterpart and is refused, naming the models it can replay: the trace
    generator (:mod:`protocol.trace.fast`) draws independent bit errors or a per-lane DFE chain
    whose good state is error-free, not a two-state channel with errors in both states.
    """
    name = model or fit.get("best")
    models = fit.get("models")
    if not isinstance(models, dict):
        raise ValueError(f"{where}: field 'models' is missing or not an object")
    if name is None or name not in models:
        raise ValueError(f"{where}: field 'models.{name}' is missing (fitted: {', '.join(models) or 'none'})")
    m = models[name]
    verdict = fit.get("verdict")
    if model is None and isinstance(verdict, dict) and verdict.get("status") not in (None, "fits"):
        raise ValueError(f"{where}: {verdict.get('message') or 'the fit has no law that fits'}; its best model is not a "
                         "channel the counts support: name one with --fit-model to replay it anyway")
    if name == "ge":
        def aic(k):
            v = models.get(k, {}).get("aic") if isinstance(models.get(k), dict) else None
            return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        alts = [f"{k} (AIC {'+' if aic(k) - aic('ge') >= 0 else ''}{aic(k) - aic('ge'):.4g} vs ge)"
                if aic(k) is not None and aic("ge") is not None else k for k in ("dfe", "binomial") if k in models]
        raise ValueError(f"{where}: {'the best model by AIC' if model is None else 'the model asked for'} is 'ge' "
                         "(Gilbert-Elliott), which the trace generator cannot draw: it has independent bit errors and a "
                         "per-lane DFE chain only (no second state with its own error rate); pick "
                         + (f"--fit-model {' or '.join(alts)}" if alts else "a fit with a binomial or dfe model"))
    if not isinstance(m, dict) or not isinstance(m.get("params"), dict):
        raise ValueError(f"{where}: field 'models.{name}.params' is missing or not an object")
    params = m["params"]
    try:
        ber = float(m["predicted"]["pre_fec_ber"]["value"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: field 'models.{name}.predicted.pre_fec_ber.value' is missing or not a number") from None
    if not 0 < ber < 0.5:
        raise ValueError(f"{where}: fitted pre-FEC BER {ber!r} of model {name!r} is not in (0, 0.5)")
    if name == "binomial":
        return {"model": name, "params": params, "ber": ber, "burst_pb": None, "note": ""}
    if name == "dfe":
        pb = params.get("pb")
        if isinstance(pb, bool) or not isinstance(pb, (int, float)) or not 0 <= pb < 1:
            raise ValueError(f"{where}: field 'models.dfe.params.pb' is missing or not in [0, 1), got {pb!r}")
        bp = (1.0 + float(pb)) / 2.0
        return {"model": name, "params": params, "ber": ber, "burst_pb": bp,
                "note": f"burst_pb {bp:.4g} converted from the fit's PAM4-symbol pb {float(pb):.4g} "
                        "as (1 + pb) / 2 (same mean burst span in RS symbols on the generator's lane bits)"}
    raise ValueError(f"{where}: model {name!r} has no trace-generator channel; use --fit-model binomial or dfe")
