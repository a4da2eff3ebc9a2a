"""GF(2^10) with p(x) = x^10 + x^3 + 1 (0x409), the symbol field of the 802.3 RS-FEC (91.5.2.7, 119.2.4.6).

Symbols are in polynomial basis: bit i of a symbol is the coefficient of alpha^i, alpha = x = 2.
Arithmetic uses log/antilog tables, built once at import and then read-only (module constants,
also frozen into the Numba kernels of :mod:`phy802.fec._kernels`).

``EXP`` is laid out so that a product never needs a branch or a modulo:
``EXP[LOG[a] + LOG[b]] == a * b`` for every a, b in 0..1023, because ``LOG[0] = LOG_ZERO = 4096`` and
``EXP[i] = 0`` for ``i >= 4096`` while ``EXP[i] = alpha^(i mod 1023)`` below that. Adding a log
constant ``c`` in 0..3*1023 to ``LOG[a]`` also stays inside the table.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "M",
    "Q",
    "ORDER",
    "PRIM_POLY",
    "LOG_ZERO",
    "EXP",
    "LOG",
    "gf_mul",
    "gf_div",
    "gf_inv",
    "gf_pow_alpha",
    "poly_mul",
    "poly_eval",
    "poly_mod",
]

M = 10  #: bits per symbol
Q = 1 << M  #: field size, 1024
ORDER = Q - 1  #: multiplicative order of alpha, 1023
PRIM_POLY = 0x409  #: x^10 + x^3 + 1 (91.5.2.7)
LOG_ZERO = 4096  #: LOG[0]; any sum involving it indexes the zero tail of EXP


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    exp = np.zeros(2 * LOG_ZERO + 1, dtype=np.uint16)
    log = np.zeros(Q, dtype=np.int32)
    x = 1
    for i in range(ORDER):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & Q:
            x ^= PRIM_POLY
    if x != 1:  # pragma: no cover - would mean p(x) is not primitive
        raise AssertionError("x^10 + x^3 + 1 must be primitive")
    for i in range(ORDER, LOG_ZERO):
        exp[i] = exp[i % ORDER]
    log[0] = LOG_ZERO
    exp.setflags(write=False)
    log.setflags(write=False)
    return exp, log


EXP, LOG = _build_tables()


def _as_sym(a) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"GF(2^10) symbols must be integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= Q):
        raise ValueError(f"GF(2^10) symbols must be in 0..{Q - 1}")
    return arr.astype(np.int64)


def gf_mul(a, b) -> np.ndarray:
    """Elementwise product of symbol arrays (broadcasting)."""
    return EXP[LOG[_as_sym(a)] + LOG[_as_sym(b)]]


def gf_inv(a) -> np.ndarray:
    """Elementwise inverse; raises ``ZeroDivisionError`` for 0."""
    a = _as_sym(a)
    if np.any(a == 0):
        raise ZeroDivisionError("0 has no inverse in GF(2^10)")
    return EXP[(ORDER - LOG[a]) % ORDER]


def gf_div(a, b) -> np.ndarray:
    """Elementwise ``a / b``; raises ``ZeroDivisionError`` where ``b == 0``."""
    return gf_mul(a, gf_inv(b))


def gf_pow_alpha(e) -> np.ndarray:
    """``alpha ** e`` for integer exponents (any sign)."""
    return EXP[np.mod(np.asarray(e, dtype=np.int64), ORDER)]


def poly_mul(p, q) -> np.ndarray:
    """Product of two polynomials given high -> low (index 0 = highest degree)."""
    p, q = _as_sym(p), _as_sym(q)
    out = np.zeros(len(p) + len(q) - 1, dtype=np.uint16)
    for i, c in enumerate(p):
        if c:
            out[i : i + len(q)] ^= gf_mul(c, q).astype(np.uint16)
    return out


def poly_eval(p, x) -> np.ndarray:
    """Evaluate the polynomial ``p`` (high -> low) at the symbols ``x`` by Horner's rule."""
    p = _as_sym(p)
    x = _as_sym(x)
    acc = np.zeros(x.shape, dtype=np.int64)
    for c in p:
        acc = gf_mul(acc, x).astype(np.int64) ^ c
    return acc.astype(np.uint16)


def poly_mod(p, g) -> np.ndarray:
    """Remainder of ``p`` divided by the monic ``g`` (both high -> low); length ``len(g) - 1``."""
    p = _as_sym(p)
    g = _as_sym(g)
    if g[0] != 1:
        raise ValueError("poly_mod needs a monic divisor (leading coefficient 1)")
    d = len(g) - 1
    p = np.concatenate([np.zeros(max(0, d - len(p)), dtype=np.int64), p])
    for i in range(len(p) - d):
        c = p[i]
        if c:
            p[i : i + d + 1] ^= gf_mul(c, g)
    return p[len(p) - d :].astype(np.uint16) if d else np.zeros(0, dtype=np.uint16)
