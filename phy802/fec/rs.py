"""Reed-Solomon codes over GF(2^10) as used by 802.3 RS-FEC (91.5.2.7, 119.2.4.6).

``RS(n, k)`` is shortened from RS(1023, 1023-2t) with generator ``g(x) = prod_{j=0}^{2t-1} (x - alpha^j)``
(first consecutive root 0), systematic: ``c(x) = m(x) x^(2t) + (m(x) x^(2t) mod g(x))``.
Arrays hold symbols first in time first: index 0 is the coefficient of ``x^(n-1)`` (``m_{k-1}``),
the 2t parity symbols come last (119.2.4.6, Table 119-3 order).

Every function is batched over leading axes (``[..., n]``) and checks dtype, range and shape
before calling the Numba kernels in :mod:`phy802.fec._kernels`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from . import _kernels as K
from .gf1024 import EXP, LOG, ORDER, Q, poly_mod, poly_mul

__all__ = [
    "RSCode",
    "KP4",
    "KR4",
    "RS272",
    "CODES",
    "CODE_NAMES",
    "code_by_name",
    "encode",
    "decode",
    "syndromes",
    "is_codeword",
    "syndromes_sparse",
    "decode_syndromes",
    "error_pattern_outcome",
]


@dataclass(frozen=True)
class RSCode:
    """An RS(n, k) code over GF(2^10), shortened from length 1023.

    Parameters
    ----------
    n, k : codeword and message length in 10-bit symbols; ``0 < k < n <= 1023`` and ``n - k`` even.
    name : label only (e.g. ``"KP4"``); ignored by ``==`` and ``hash`` (``RSCode(544, 514) == KP4``).
    """

    n: int
    k: int
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for f in ("n", "k"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"RSCode.{f} must be an int, got {type(v).__name__}")
        if not 0 < self.k < self.n <= ORDER:
            raise ValueError(f"RSCode needs 0 < k < n <= {ORDER}, got n={self.n}, k={self.k}")
        if (self.n - self.k) % 2:
            raise ValueError(f"RSCode needs n - k even (2t parity symbols), got n={self.n}, k={self.k}")
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "k", int(self.k))

    @property
    def t(self) -> int:
        """Symbol-error correction capability, ``(n - k) // 2``."""
        return (self.n - self.k) // 2

    @property
    def nparity(self) -> int:
        """Number of parity symbols, ``2t``."""
        return self.n - self.k

    @property
    def generator_poly(self) -> np.ndarray:
        """g(x) coefficients high -> low (leading 1), uint16[2t + 1]."""
        return _generator(self.n - self.k).copy()

    def __str__(self) -> str:
        label = f"{self.name} " if self.name else ""
        return f"{label}RS({self.n},{self.k}) t={self.t}"


KP4 = RSCode(544, 514, "KP4")  #: RS(544,514), t = 15 (Cl.91 / Cl.119, 200G/400G)
KR4 = RSCode(528, 514, "KR4")  #: RS(528,514), t = 7 (Cl.91, 100GBASE-KR4/CR4)
#: RS(272,257+1), t = 7: the 25G/50G Ethernet Consortium low-latency RS-FEC ("LL-FEC", ethtool
#: ``LLRS``; tradeoff notes sec.1 [S]).  k = 258 = ten 257b blocks (2570 bits = 257 symbols) plus
#: one 10-bit pad symbol; same field and generator form as KP4 with 2t = 14 roots (so g(x) is
#: KR4's).  Where the pad sits and its value: :class:`phy802.pcs.PcsConfig` ([?] in the notes).
RS272 = RSCode(272, 258, "RS272")

#: The codes by their vocabulary name (``--code kp4|kr4|rs272``; ``none`` = no FEC
#: sublayer has no RSCode).
CODES: dict[str, RSCode] = {"kp4": KP4, "kr4": KR4, "rs272": RS272}
CODE_NAMES: tuple[str, ...] = tuple(CODES)


def code_by_name(name: str) -> RSCode:
    """The :class:`RSCode` called ``name`` (``kp4``, ``kr4``, ``rs272``; case-insensitive)."""
    if isinstance(name, RSCode):
        return name
    key = str(name).strip().lower()
    if key not in CODES:
        extra = " ('none' means no FEC sublayer and has no RSCode)" if key == "none" else ""
        raise ValueError(f"unknown RS code {name!r}; choose from {', '.join(CODE_NAMES)}{extra}")
    return CODES[key]


# --------------------------------------------------------------------------------------------
# Per-code tables (pure functions of (n, k), memoised)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _generator(nparity: int) -> np.ndarray:
    g = np.array([1], dtype=np.uint16)
    for j in range(nparity):
        g = poly_mul(g, np.array([1, EXP[j]], dtype=np.uint16))  # (x - alpha^j), char 2
    g.setflags(write=False)
    return g


@functools.lru_cache(maxsize=None)
def _slice_tables(nparity: int) -> np.ndarray:
    """``T[s, f]`` = lanes of ``f * x^(nparity+5-s) mod g(x)``, 10-bit lanes, 6 per uint64.

    Shape (6, 1024, W) with W = max(5, ceil(nparity / 6)); lane l (bits 10*(l%6) of word l//6) is
    the coefficient of x^(nparity-1-l). See :mod:`phy802.fec._kernels` for the recurrence.
    """
    g = _generator(nparity)
    W = max(5, -(-nparity // 6))
    T = np.zeros((6, Q, W), dtype=np.uint64)
    f = np.arange(Q, dtype=np.int64)
    for s in range(6):
        xe = np.zeros(nparity + 5 - s + 1, dtype=np.uint16)
        xe[0] = 1
        base = poly_mod(xe, g).astype(np.int64)  # high -> low, length nparity
        lanes = EXP[LOG[f][:, None] + LOG[base][None, :]].astype(np.uint64)  # (1024, nparity)
        for l in range(nparity):
            T[s, :, l // 6] |= lanes[:, l] << np.uint64(10 * (l % 6))
    T.setflags(write=False)
    return T


@functools.lru_cache(maxsize=None)
def _rem_exponents(nparity: int) -> np.ndarray:
    """``E[j, l] = (nparity-1-l) * j mod 1023``: exponent of remainder lane l in syndrome j."""
    j = np.arange(nparity, dtype=np.int64)[:, None]
    l = np.arange(nparity, dtype=np.int64)[None, :]
    E = ((nparity - 1 - l) * j) % ORDER
    E.setflags(write=False)
    return E


# --------------------------------------------------------------------------------------------
# Input checking
# --------------------------------------------------------------------------------------------


def _check_code(code: RSCode) -> None:
    if not isinstance(code, RSCode):
        raise TypeError(f"code must be an RSCode (e.g. KP4, KR4), got {type(code).__name__}")


def _as_symbols(a, length: int, what: str) -> np.ndarray:
    """Coerce to a C-contiguous uint16 array [..., length] of values 0..1023, or raise ValueError."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "b" or arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{what} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{what} must have at least one axis of length {length}, got a scalar")
    if arr.shape[-1] != length:
        raise ValueError(f"{what} must have last axis of length {length}, got shape {arr.shape}")
    if arr.size:
        hi = arr.max()
        lo = arr.min() if arr.dtype.kind == "i" else 0  # one pass fewer for unsigned input
        if lo < 0 or hi >= Q:
            bad = int(hi) if hi >= Q else int(lo)
            idx = np.argwhere(arr == bad)[0]
            raise ValueError(
                f"{what} symbols must be in 0..{Q - 1}; found {bad} at index {tuple(int(i) for i in idx)}"
            )
    return np.ascontiguousarray(arr, dtype=np.uint16)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def encode(code: RSCode, msgs) -> np.ndarray:
    """Systematic encoding.

    Parameters
    ----------
    code : the RS code.
    msgs : integer array [..., k] of symbols 0..1023, index 0 = m_{k-1} (first in time).

    Returns
    -------
    uint16 array [..., n]: the message followed by the 2t parity symbols.
    """
    _check_code(code)
    m = _as_symbols(msgs, code.k, "messages")
    lead = m.shape[:-1]
    flat = m.reshape(-1, code.k)
    out = np.empty((flat.shape[0], code.n), dtype=np.uint16)
    K.encode_batch(flat, _slice_tables(code.nparity), code.nparity, out)
    return out.reshape(lead + (code.n,))


def _remainder(code: RSCode, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = w.reshape(-1, code.n)
    rem = np.empty((flat.shape[0], code.nparity), dtype=np.uint16)
    ok = K.remainder_batch(flat, code.k, _slice_tables(code.nparity), code.nparity, rem)
    return rem, ok


def syndromes(code: RSCode, words) -> np.ndarray:
    """Syndromes ``S_j = r(alpha^j)``, j = 0..2t-1, of received words [..., n] -> uint16 [..., 2t]."""
    _check_code(code)
    w = _as_symbols(words, code.n, "words")
    rem, _ = _remainder(code, w)
    S = np.empty_like(rem)
    K.syndromes_from_remainder(rem, _rem_exponents(code.nparity), S)
    return S.reshape(w.shape[:-1] + (code.nparity,))


def is_codeword(code: RSCode, words) -> np.ndarray:
    """bool [...]: True where the word [..., n] is a codeword (all syndromes zero)."""
    _check_code(code)
    w = _as_symbols(words, code.n, "words")
    _, ok = _remainder(code, w)
    return ok.reshape(w.shape[:-1])


def decode(
    code: RSCode, words, *, mode: Literal["correct", "detect"] = "correct"
) -> tuple[np.ndarray, np.ndarray]:
    """Bounded-distance decoding (syndromes, Berlekamp-Massey, Chien, Forney).

    Parameters
    ----------
    code : the RS code.
    words : integer array [..., n] of received symbols.
    mode : ``"correct"`` (default) or ``"detect"`` (syndrome check only, words returned unchanged;
        the Cl.91 bypass-correction style of operation).

    Returns
    -------
    (decoded uint16 [..., n], n_corrected int16 [...]). ``n_corrected`` is the number of symbols
    changed (0..t), or -1 where the word is uncorrectable (in detect mode: where it is not a
    codeword, those words being returned unchanged). Up to t symbol errors are always corrected;
    with more, the decoder reports -1 or, rarely, lands on another codeword; it never returns a
    non-codeword as corrected (every correction is checked against all 2t syndromes).
    """
    _check_code(code)
    if mode not in ("correct", "detect"):
        raise ValueError(f"mode must be 'correct' or 'detect', got {mode!r}")
    w = _as_symbols(words, code.n, "words")
    out = w.reshape(-1, code.n).copy()
    ncorr = np.empty(out.shape[0], dtype=np.int16)
    K.decode_batch(
        out,
        code.k,
        _slice_tables(code.nparity),
        code.t,
        _rem_exponents(code.nparity),
        mode == "detect",
        ncorr,
    )
    return out.reshape(w.shape), ncorr.reshape(w.shape[:-1])


def _sparse_args(code: RSCode, positions, values) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate a sparse error list; returns (int64 [rows, m], uint16 [rows, m], rows)."""
    _check_code(code)
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu":
        raise ValueError(f"positions must be an integer array, got dtype {pos.dtype}")
    if pos.ndim == 0:
        raise ValueError("positions must have at least one axis (the error list)")
    val = _as_symbols(values, pos.shape[-1], "values")
    if val.shape != pos.shape:
        raise ValueError(f"positions and values must have the same shape, got {pos.shape} and {val.shape}")
    if pos.size and (pos.min() < 0 or pos.max() >= code.n):
        raise ValueError(f"positions must be in 0..{code.n - 1}, got range {pos.min()}..{pos.max()}")
    rows = int(np.prod(pos.shape[:-1], dtype=np.int64))
    p = np.ascontiguousarray(pos.reshape(rows, pos.shape[-1]), dtype=np.int64)
    return p, val.reshape(p.shape), rows


def syndromes_sparse(code: RSCode, positions, values) -> np.ndarray:
    """Syndromes of a sparse error pattern (the transmitted word being known, only errors matter).

    By linearity the syndromes of ``sent + e`` equal those of ``e``; computing them from the error
    positions alone costs O(#errors * 2t) instead of O(n). Useful for fast error-trace generation.

    Parameters
    ----------
    positions : integer array [..., m] of word indices 0..n-1 (index 0 = first in time).
        Use any valid index with value 0 for padding; repeated positions add (XOR) their values.
    values : integer array [..., m] of error values 0..1023 (0 = no error).

    Returns
    -------
    uint16 [..., 2t], identical to ``syndromes(code, sent ^ e)`` for any codeword ``sent``.
    """
    p, v, rows = _sparse_args(code, positions, values)
    S = np.empty((rows, code.nparity), dtype=np.uint16)
    K.syndromes_sparse_batch(p, v, code.n, S)
    pos = np.asarray(positions)
    return S.reshape(pos.shape[:-1] + (code.nparity,))


def decode_syndromes(code: RSCode, synd) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Error pattern the decoder infers from syndromes [..., 2t].

    Returns
    -------
    (positions int16 [..., t], values uint16 [..., t], count int16 [...]): the first ``count`` entries
    hold the word indices and values the decoder would correct (unused slots: position -1, value 0);
    ``count`` is -1 where the decoder reports the word uncorrectable.
    """
    _check_code(code)
    S = _as_symbols(synd, code.nparity, "syndromes")
    flat = S.reshape(-1, code.nparity)
    pos = np.empty((flat.shape[0], code.t), dtype=np.int16)
    val = np.empty((flat.shape[0], code.t), dtype=np.uint16)
    cnt = np.empty(flat.shape[0], dtype=np.int16)
    K.decode_syndromes_batch(flat, code.n, code.t, pos, val, cnt)
    lead = S.shape[:-1]
    return pos.reshape(lead + (code.t,)), val.reshape(lead + (code.t,)), cnt.reshape(lead)


def error_pattern_outcome(code: RSCode, positions, values) -> np.ndarray:
    """What the decoder does to a sent word hit by a sparse error pattern, without building words.

    Returns int8 [...]: 0 = decoded to the sent word (corrected, or no error), 1 = detected as
    uncorrectable, 2 = miscorrected (decoded to a different codeword). Agrees with
    ``decode(code, sent ^ e)`` for any codeword ``sent``, because decoding depends only on the syndromes.
    Patterns of weight <= t are answered without decoding (a bounded-distance decoder always
    corrects them); heavier ones are decoded from their sparse syndromes.
    """
    pos = np.asarray(positions)
    p, v, rows = _sparse_args(code, positions, values)
    out = np.empty(rows, dtype=np.int8)
    K.outcome_batch(p, v, code.n, code.t, out)
    return out.reshape(pos.shape[:-1])
