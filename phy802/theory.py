"""Closed-form and semi-analytic error rates: PAM4 on AWGN, RS codeword failure, burst models,
and a rare-event estimator for post-FEC frame error ratios down to 1e-15 and below.

Conventions
-----------
* PAM4 levels ``-3, -1, +1, +3`` (level index 0..3), equiprobable, decision thresholds -2, 0, +2.
  **SNR = average symbol energy / noise variance** = ``E[a^2] / sigma^2 = 5 / sigma^2`` (a real
  channel; one noise sample per symbol), in dB ``10 log10``. With ``d = 1/sigma`` (half the level
  spacing over sigma), ``Q(x) = P(N(0,1) > x)``:

  - SER = 3/2 Q(d) (exact: inner levels err w.p. 2Q(d), outer w.p. Q(d));
  - BER (Gray, 2 bits/symbol) = (3 Q(d) + 2 Q(3d) - Q(5d)) / 4 (exact, counts the 2-level and
    3-level jumps and their Gray bit distances).
* RS(n, k) over GF(2^m) corrects ``t = (n - k) / 2`` symbol errors (bounded distance). For
  independent symbol errors of probability ``p``, FER = P(W > t) with W ~ Binomial(n, p)
  (decoder failure; miscorrection, ~1e-17 for KP4, is ignored).
* Post-FEC BER estimate (independent errors, the usual IEEE-contribution formula): a failing
  word is passed on with its W wrong symbols, each with ``m * BER / SER_sym`` wrong bits on
  average, so ``BER_post = sum_{w>t} w P(W=w) / n * BER / SER_sym``. Errors are uniform over
  the codeword, so this is also the BER of the k message symbols.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special

from phy802.clause119 import CODE_SIZES, SYMBOL_BITS

__all__ = [
    "RsCode",
    "KP4",
    "KR4",
    "RS272",
    "CODES",
    "rs_code",
    "q_function",
    "sigma_from_snr_db",
    "snr_db_from_sigma",
    "pam4_transition_matrix",
    "pam4_ser",
    "pam4_ber",
    "snr_db_for_ber",
    "snr_db_for_ser",
    "symbol_error_prob",
    "bit_error_prob",
    "rs_codeword_error_ratio",
    "rs_post_fec_ser",
    "post_fec_ber",
    "pre_fec_ber_for_fer",
    "ErrorChain",
    "precoded_chain",
    "markov_symbol_error_pmf",
    "markov_codeword_error_ratio",
    "RareEventResult",
    "rare_event_fer",
]

#: average energy of the levels -3, -1, 1, 3
ES_PAM4 = 5.0


@dataclass(frozen=True, slots=True)
class RsCode:
    """An RS(n, k) code over GF(2^m); ``t = (n - k) // 2``."""

    n: int
    k: int
    m: int = 10
    name: str = ""

    @property
    def t(self) -> int:
        return (self.n - self.k) // 2


KP4 = RsCode(CODE_SIZES["kp4"].n, CODE_SIZES["kp4"].k, SYMBOL_BITS, "kp4")  # RS(544,514), 119.2.4.6 / 91.5.2.7
KR4 = RsCode(CODE_SIZES["kr4"].n, CODE_SIZES["kr4"].k, SYMBOL_BITS, "kr4")  # RS(528,514), Clause 91
RS272 = RsCode(CODE_SIZES["rs272"].n, CODE_SIZES["rs272"].k, SYMBOL_BITS, "rs272")  # RS(272,257+1), t = 7: Ethernet Consortium LL-FEC (tradeoff notes sec.1)
#: the closed-form codes by their vocabulary name (as :data:`phy802.fec.CODES`)
CODES: dict[str, RsCode] = {"kp4": KP4, "kr4": KR4, "rs272": RS272}


def rs_code(name: str | RsCode) -> RsCode:
    """The :class:`RsCode` called ``name`` (``kp4``, ``kr4``, ``rs272``)."""
    if isinstance(name, RsCode):
        return name
    key = str(name).strip().lower()
    if key not in CODES:
        raise ValueError(f"unknown RS code {name!r}; choose from {', '.join(CODES)}")
    return CODES[key]


# --------------------------------------------------------------------------- PAM4 on AWGN


def q_function(x):
    """Gaussian tail ``Q(x) = P(N(0,1) > x)``, accurate for large ``x`` (uses ``ndtr(-x)``)."""
    return special.ndtr(-np.asarray(x, dtype=float))


def sigma_from_snr_db(snr_db):
    """Noise standard deviation for levels -3..3 at ``SNR = 5 / sigma^2`` (dB)."""
    return np.sqrt(ES_PAM4 / 10.0 ** (np.asarray(snr_db, dtype=float) / 10.0))


def snr_db_from_sigma(sigma):
    return 10.0 * np.log10(ES_PAM4 / np.asarray(sigma, dtype=float) ** 2)


def pam4_transition_matrix(snr_db: float) -> np.ndarray:
    """``T[s, r] = P(slice to level r | sent level s)`` on AWGN (closed form, exact).

    Off-diagonal entries are differences of Gaussian tails taken on the far side of each threshold
    (no cancellation for small probabilities); the diagonal is one minus the row's errors.
    """
    sigma = float(sigma_from_snr_db(snr_db))
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"snr_db must be finite, got {snr_db}")
    a = np.array([-3.0, -1.0, 1.0, 3.0])
    thr = np.array([-np.inf, -2.0, 0.0, 2.0, np.inf])
    T = np.zeros((4, 4))
    for s in range(4):
        for r in range(4):
            if r > s:  # P(thr[r] < y < thr[r+1]) = Q((thr[r]-a)/sigma) - Q((thr[r+1]-a)/sigma)
                T[s, r] = special.ndtr(-(thr[r] - a[s]) / sigma) - special.ndtr(-(thr[r + 1] - a[s]) / sigma)
            elif r < s:  # mirror: P(thr[r] < y < thr[r+1]) = Q((a-thr[r+1])/sigma) - Q((a-thr[r])/sigma)
                T[s, r] = special.ndtr(-(a[s] - thr[r + 1]) / sigma) - special.ndtr(-(a[s] - thr[r]) / sigma)
        T[s, s] = 1.0 - (T[s].sum() - T[s, s])
    return T


def pam4_ser(snr_db):
    """Symbol error ratio ``3/2 Q(1/sigma)`` of equiprobable PAM4 on AWGN (exact)."""
    d = 1.0 / sigma_from_snr_db(snr_db)
    return 1.5 * q_function(d)


def pam4_ber(snr_db):
    """Gray-coded bit error ratio ``(3Q(d) + 2Q(3d) - Q(5d)) / 4``, ``d = 1/sigma`` (exact)."""
    d = 1.0 / sigma_from_snr_db(snr_db)
    return (3.0 * q_function(d) + 2.0 * q_function(3 * d) - q_function(5 * d)) / 4.0


def _log_pam4(snr_db: float, kind: str) -> float:
    """log SER or log BER, from ``log_ndtr`` so that it stays finite where Q underflows."""
    d = 1.0 / float(sigma_from_snr_db(snr_db))
    l1 = special.log_ndtr(-d)
    if kind == "ser":
        return math.log(1.5) + l1
    r3 = math.exp(special.log_ndtr(-3 * d) - l1)
    r5 = math.exp(special.log_ndtr(-5 * d) - l1)
    return l1 + math.log((3.0 + 2.0 * r3 - r5) / 4.0)


def _invert(kind: str, target: float) -> float:
    target = float(target)
    top = 0.5 if kind == "ber" else 0.75
    if not 0.0 < target < top:
        raise ValueError(f"{kind} must be in (0, {top}) for PAM4, got {target}")
    lo, hi = -40.0, 120.0
    f = lambda x: _log_pam4(x, kind) - math.log(target)
    if f(lo) < 0:
        raise ValueError(f"{kind}={target} is above what SNR >= {lo} dB gives")
    if f(hi) > 0:
        raise ValueError(f"{kind}={target} is below what SNR <= {hi} dB gives")
    return float(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-14))


def snr_db_for_ber(ber: float) -> float:
    """Inverse of :func:`pam4_ber`: the SNR (dB) giving pre-FEC bit error ratio ``ber``."""
    return _invert("ber", ber)


def snr_db_for_ser(ser: float) -> float:
    """Inverse of :func:`pam4_ser`."""
    return _invert("ser", ser)


# --------------------------------------------------------------------------- RS over independent errors


def symbol_error_prob(bit_error_prob, bits_per_symbol: int = 10):
    """``1 - (1 - p)^m``: an m-bit RS symbol is wrong if any of its bits is (independent bits)."""
    p = np.asarray(bit_error_prob, dtype=float)
    return -np.expm1(bits_per_symbol * np.log1p(-p))


def bit_error_prob(symbol_error_prob_, bits_per_symbol: int = 10):
    """Inverse of :func:`symbol_error_prob`."""
    ps = np.asarray(symbol_error_prob_, dtype=float)
    return -np.expm1(np.log1p(-ps) / bits_per_symbol)


@functools.lru_cache(maxsize=16)
def _tail_terms(n: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(w, n - w, log C(n, w), log w)`` for ``w = t+1..n`` (read-only; a function of the code)."""
    w = np.arange(t + 1, n + 1, dtype=float)
    out = (w, n - w, special.gammaln(n + 1) - (special.gammaln(w + 1) + special.gammaln(n - w + 1)), np.log(w))
    for a in out:
        a.flags.writeable = False
    return out


def _tail_log(p: float, n: int, t: int, weight_by_w: bool = False) -> float:
    """``log sum_{w>t} [w] P(W = w)``, W ~ Binomial(n, p): scipy's ``binom.logpmf`` terms and
    ``logsumexp`` (largest term kept out of the sum) without their per-call overhead, which was
    most of a switch's ``fec tail`` fit."""
    w, rest, comb, logw = _tail_terms(n, t)
    lp = comb + special.xlogy(w, p) + special.xlog1py(rest, -p)
    if weight_by_w:
        lp = lp + logw
    i = int(np.argmax(lp))
    top = lp[i]
    if not math.isfinite(top):
        return float(top)
    e = np.exp(lp - top)
    e[i] = 0.0
    return float(np.log1p(np.sum(e)) + top)


def rs_codeword_error_ratio(symbol_error_prob_, code: RsCode = KP4):
    """P(W > t), W ~ Binomial(n, p): the codeword error ratio for independent symbol errors.

    Summed as ``logsumexp`` of the log-pmf over ``w = t+1..n`` (no ``1 - cdf`` cancellation), so
    it stays accurate far below 1e-15.
    """
    p = np.asarray(symbol_error_prob_, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("symbol error probability must be in [0, 1]")
    out = np.array([0.0 if x == 0 else math.exp(_tail_log(float(x), code.n, code.t)) for x in p.reshape(-1)])
    return out.reshape(p.shape) if p.ndim else float(out[0])


def rs_post_fec_ser(symbol_error_prob_, code: RsCode = KP4):
    """Post-FEC RS symbol error ratio ``sum_{w>t} w P(W=w) / n`` (failed words pass uncorrected)."""
    p = np.asarray(symbol_error_prob_, dtype=float)
    out = np.array(
        [0.0 if x == 0 else math.exp(_tail_log(float(x), code.n, code.t, True)) / code.n for x in p.reshape(-1)]
    )
    return out.reshape(p.shape) if p.ndim else float(out[0])


def post_fec_ber(pre_fec_ber, code: RsCode = KP4):
    """Post-FEC BER for independent bit errors (see the module docstring for the formula)."""
    b = np.asarray(pre_fec_ber, dtype=float)
    ps = symbol_error_prob(b, code.m)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(ps > 0, rs_post_fec_ser(ps, code) * b / np.where(ps > 0, ps, 1.0), 0.0)
    return out if b.ndim else float(out)


def pre_fec_ber_for_fer(fer: float, code: RsCode = KP4) -> float:
    """The pre-FEC BER (independent bit errors) at which the codeword error ratio equals ``fer``."""
    if not 0.0 < fer < 1.0:
        raise ValueError(f"fer must be in (0, 1), got {fer}")
    f = lambda lb: math.log(rs_codeword_error_ratio(float(symbol_error_prob(10.0**lb, code.m)), code)) - math.log(fer)
    return 10.0 ** float(optimize.brentq(f, -12.0, -0.5, xtol=1e-13))


# --------------------------------------------------------------------------- Markov (burst) models


@dataclass(frozen=True)
class ErrorChain:
    """A hidden-Markov error process over "units" (PAM4 symbols or bits).

    ``P[x, y]`` = P(state of unit j+1 = y | state of unit j = x); unit ``j`` is in error with
    probability ``e[x_j]``; ``pi0`` is the law of the first unit's state (default: stationary).
    ``alternate`` gives consecutive errors alternating signs (1-tap DFE with a positive tap).
    """

    P: np.ndarray
    e: np.ndarray
    pi0: np.ndarray | None = None
    alternate: bool = False
    name: str = "chain"
    _pi: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        P = np.array(self.P, dtype=float)
        e = np.array(self.e, dtype=float)
        S = e.shape[0]
        if P.shape != (S, S) or np.any(P < 0) or not np.allclose(P.sum(1), 1.0):
            raise ValueError(f"P must be a {S}x{S} stochastic matrix, got {P}")
        if np.any((e < 0) | (e > 1)):
            raise ValueError(f"e must be probabilities, got {e}")
        if self.pi0 is None:
            w, v = np.linalg.eig(P.T)
            pi = np.real(v[:, np.argmin(abs(w - 1.0))])
            pi = np.abs(pi) / np.abs(pi).sum()
        else:
            pi = np.array(self.pi0, dtype=float)
            if pi.shape != (S,) or not math.isclose(pi.sum(), 1.0):
                raise ValueError(f"pi0 must be a distribution over {S} states")
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "e", e)
        object.__setattr__(self, "_pi", pi)

    @property
    def initial(self) -> np.ndarray:
        return self._pi

    @property
    def error_rate(self) -> float:
        """Stationary error probability per unit."""
        w, v = np.linalg.eig(self.P.T)
        pi = np.real(v[:, np.argmin(abs(w - 1.0))])
        pi = np.abs(pi) / np.abs(pi).sum()
        return float(pi @ self.e)

    @classmethod
    def iid(cls, p: float, alternate: bool = False) -> "ErrorChain":
        """Independent unit errors with probability ``p``."""
        return cls(np.ones((1, 1)), np.array([p]), None, alternate, f"iid(p={p:g})")

    @classmethod
    def dfe(cls, pe: float, pb: float, alternate: bool = True) -> "ErrorChain":
        """1-tap DFE error propagation: G->B w.p. ``pe``, B->B w.p. ``pb``; errors exactly in B.

        Burst lengths are geometric, P(L = l) = (1 - pb) pb^(l-1); stationary error rate
        ``pe / (pe + 1 - pb)``.
        """
        if not (0 <= pe <= 1 and 0 <= pb < 1):
            raise ValueError(f"need 0 <= pe <= 1 and 0 <= pb < 1, got pe={pe}, pb={pb}")
        P = np.array([[1 - pe, pe], [1 - pb, pb]])
        return cls(P, np.array([0.0, 1.0]), None, alternate, f"dfe(pe={pe:g},pb={pb:g})")

    @classmethod
    def gilbert_elliott(cls, p_gb: float, p_bg: float, e_g: float, e_b: float, alternate: bool = False) -> "ErrorChain":
        """Gilbert-Elliott: G->B w.p. ``p_gb``, B->G w.p. ``p_bg``, error probability ``e_g``/``e_b``."""
        P = np.array([[1 - p_gb, p_gb], [p_bg, 1 - p_bg]])
        return cls(P, np.array([e_g, e_b]), None, alternate, f"ge({p_gb:g},{p_bg:g},{e_g:g},{e_b:g})")


def precoded_chain(chain: ErrorChain) -> ErrorChain:
    """The error chain seen *after* the RX 1/(1+D) decoder (120.5.7.2), as an exact HMM.

    The decoded data error at unit ``j`` is ``e(j) + e(j-1)`` (mod 4). With one-level line errors
    it is non-zero iff exactly one of units ``j-1, j`` is wrong, or both are wrong with the same
    sign: never for ``alternate`` signs, with probability 1/2 (independently) for random signs.
    So the augmented state ``(x_j, z_(j-1), z_j)`` (``z`` = line error flag) emits the data error
    with a probability that depends on the state only. No line error precedes unit 0.
    """
    S = chain.e.shape[0]
    both = 0.0 if chain.alternate else 0.5
    P2 = np.zeros((4 * S, 4 * S))
    e2 = np.zeros(4 * S)
    pi2 = np.zeros(4 * S)
    for x in range(S):
        for zp in (0, 1):
            for z in (0, 1):
                a = 4 * x + 2 * zp + z
                e2[a] = both if (zp and z) else float(zp ^ z)
                for y in range(S):
                    for z2 in (0, 1):
                        P2[a, 4 * y + 2 * z + z2] = chain.P[x, y] * (chain.e[y] if z2 else 1.0 - chain.e[y])
        for z in (0, 1):
            pi2[4 * x + z] = chain.initial[x] * (chain.e[x] if z else 1.0 - chain.e[x])
    return ErrorChain(P2, e2, pi2, False, chain.name + "+precoder")


def markov_symbol_error_pmf(
    chain: ErrorChain, units_per_symbol: int, n_symbols: int, precoded: bool = False
) -> np.ndarray:
    """Exact distribution of the number of wrong RS symbols in a codeword (dynamic programming).

    The codeword is ``n_symbols`` consecutive groups of ``units_per_symbol`` units of the chain
    (e.g. 5 PAM4 symbols or 10 bits per 10-bit RS symbol), started from ``chain.initial``; a symbol
    is wrong if any of its units is. ``precoded`` counts the errors after the RX precoder
    (:func:`precoded_chain`). Idealisation: no lane interleave. Returns ``pmf[0..n]``.
    Every entry is a sum of non-negative terms, so tiny tail values keep full relative accuracy.
    """
    if precoded:
        chain = precoded_chain(chain)
    P, e = chain.P, chain.e
    S = e.shape[0]
    D0, D1 = np.diag(1.0 - e), np.diag(e)
    # block transfer from the state of a symbol's first unit to the next symbol's first unit
    N, Y = np.eye(S), np.zeros((S, S))
    for _ in range(units_per_symbol):
        N, Y = N @ D0 @ P, Y @ P + N @ D1 @ P
    v = np.zeros((n_symbols + 1, S))
    v[0] = chain.initial
    for i in range(n_symbols):
        nv = v @ N
        nv[1:] += v[:-1] @ Y
        v = nv
    return v.sum(axis=1)


def markov_codeword_error_ratio(
    chain: ErrorChain, code: RsCode = KP4, units_per_symbol: int = 5, precoded: bool = False
) -> float:
    """``P(W > t)`` for the Markov model (exact, via :func:`markov_symbol_error_pmf`).

    This is the tool of choice for burst models (DFE, Gilbert-Elliott), with or without the
    precoder, at any FER (1e-15 and below included).
    """
    pmf = markov_symbol_error_pmf(chain, units_per_symbol, code.n, precoded)
    return float(pmf[code.t + 1:].sum())


# --------------------------------------------------------------------------- rare-event estimator


@dataclass(frozen=True)
class RareEventResult:
    """FER estimate ``sum_k P(K=k) * P(fail | K=k)`` and its Monte-Carlo standard error.

    ``ks``, ``p_k`` (exact), ``fails``, ``samples`` per conditioning value; ``truncation`` is an
    upper bound on the probability mass left out (k > kmax, or k with negligible P(K=k));
    ``post_ser`` the matching post-FEC RS symbol error ratio estimate.
    """

    fer: float
    std_err: float
    post_ser: float
    truncation: float
    ks: np.ndarray
    p_k: np.ndarray
    fails: np.ndarray
    samples: np.ndarray
    seconds: float

    @property
    def rel_err(self) -> float:
        return self.std_err / self.fer if self.fer > 0 else float("inf")

    @property
    def reliable(self) -> bool:
        """False when the standard error cannot be trusted: some conditioning value has fewer than
        10 observed failures although its rule-of-three bound ``P(K=k) * 3 / n_k`` exceeds 5% of
        the estimate, or the truncated mass exceeds 1% of it. Then add samples, or use the exact
        :func:`markov_codeword_error_ratio` for Markov models."""
        if self.fer <= 0:
            return False
        loose = (self.fails < 10) & (self.p_k * 3.0 / self.samples > 0.05 * self.fer)
        return not bool(loose.any()) and self.truncation <= 0.01 * self.fer

    def as_dict(self) -> dict:
        return {
            "fer": self.fer, "std_err": self.std_err, "rel_err": self.rel_err, "post_ser": self.post_ser,
            "truncation": self.truncation, "reliable": self.reliable, "seconds": self.seconds,
            "per_k": [{"k": int(k), "p_k": float(p), "fails": int(f), "samples": int(s)}
                      for k, p, f, s in zip(self.ks, self.p_k, self.fails, self.samples)],
        }


def rare_event_fer(
    chain: ErrorChain,
    code: RsCode = KP4,
    *,
    units_per_symbol: int = 5,
    precoded: bool = False,
    samples_per_k: int = 2000,
    kmax: int | None = None,
    min_weight: float = 1e-9,
    seed: int | np.random.Generator = 0,
) -> RareEventResult:
    """Conditional Monte-Carlo estimate of the codeword error ratio, for FER down to 1e-15 and below.

    Let K be the number of erroneous units in one codeword (``code.n * units_per_symbol`` units of
    ``chain``). ``P(K = k)`` is computed exactly by a forward recursion over (state, count); for
    each k, ``P(fail | K = k)`` is estimated from ``samples_per_k`` error patterns drawn exactly
    from the chain conditioned on ``K = k`` (backward sampling; a uniform k-subset for i.i.d.
    units), including several errors in one RS symbol, whole bursts, signs and the 1/(1+D)
    precoder (one line error -> two data errors; alternating bursts collapse). So the rare event
    needs no rare sampling: FER = sum_k P(K=k) P(fail|K=k), with standard error
    ``sqrt(sum_k P(K=k)^2 p_k (1 - p_k) / n_k)``.

    Values of k that cannot fail (``k <= t``, or ``2k <= t`` when precoded) are exact zeros.
    The estimate is efficient when failures come from many independent errors (the i.i.d. case,
    validated against the binomial). For strongly bursty chains the failing cells can be rare in
    themselves; :attr:`RareEventResult.reliable` flags that, and the exact DP
    :func:`markov_codeword_error_ratio` (with ``precoded``) is then the better tool.
    Idealisation: the codeword occupies consecutive units of one lane (no interleave); a precoder
    error carried in from the previous codeword is ignored.
    """
    from phy802._rng import as_generator
    from phy802._theory_kernels import conditional_fail_mc, markov_count_forward

    t0 = time.perf_counter()
    rng = as_generator(seed)
    if units_per_symbol < 1 or samples_per_k < 1:
        raise ValueError("units_per_symbol and samples_per_k must be >= 1")
    n_units = code.n * units_per_symbol
    kmin = (code.t // 2 + 1) if precoded else code.t + 1
    if kmax is None:
        kmax = max(4 * (code.t + 1), kmin + 40)
    kmax = int(min(kmax, n_units))
    iid = chain.e.shape[0] == 1
    alpha, logscale = markov_count_forward(chain.P, chain.e, chain.initial, n_units, kmax)
    last = alpha[-1].sum(axis=0) * math.exp(logscale[-1])  # P(K = c), c <= kmax; [kmax+1] = P(K > kmax)
    p_k_all = last[: kmax + 1]
    tail = float(last[kmax + 1])
    ks = np.arange(kmin, kmax + 1)
    p_k = p_k_all[kmin:]
    keep = p_k >= min_weight * max(p_k.max(), 1e-300)
    truncation = tail + float(p_k[~keep].sum())
    ks, p_k = ks[keep], p_k[keep]
    fails = np.zeros(ks.size, dtype=np.int64)
    wsum = np.zeros(ks.size, dtype=np.int64)
    for i, k in enumerate(ks):
        fails[i], wsum[i] = conditional_fail_mc(
            alpha, chain.P, chain.e, iid, int(k), samples_per_k, units_per_symbol, code.n, code.t,
            precoded, chain.alternate, rng,
        )
    samples = np.full(ks.size, samples_per_k, dtype=np.int64)
    pf = fails / samples
    fer = float(np.sum(p_k * pf))
    se = float(np.sqrt(np.sum(p_k**2 * pf * (1 - pf) / samples)))
    post_ser = float(np.sum(p_k * wsum / samples)) / code.n
    return RareEventResult(fer, se, post_ser, truncation, ks, p_k, fails, samples, time.perf_counter() - t0)
