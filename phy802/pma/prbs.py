"""PRBS9Q / PRBS13Q / PRBS31Q PAM4 test patterns (IEEE 802.3 120.5.11.2).

A PRBSxQ pattern is the PRBSx bit sequence taken in pairs ``{A, B}`` in output order and Gray
mapped (120.5.7.1). The LFSR is the Fibonacci form of the notes: state ``S0..S(N-1)``; each step
the new bit is the XOR of ``S(k-1)`` for every non-constant term ``x^k`` of the polynomial; it is
output and shifted into ``S0``. Seeds are written ``S0`` leftmost (as the standard prints them).

=========  ========================  ==================  ======================================
pattern    polynomial                default seed        status
=========  ========================  ==================  ======================================
prbs9q     x^9 + x^5 + 1             111111111           [C] 120.5.11.2 a; reproduces the
                                                         published 511-symbol sequence
prbs13q    x^13 + x^12 + x^2 + x + 1 0000010101011       [S] the seed of the IEEE 802.3 COM
                                     (S0..S12)           reference script's PRBS13Q; see below
prbs31q    x^31 + x^28 + 1,          all ones            [S] generator of Figure 49-9 (output
           output inverted                               inverter); seed [?] (none found)
=========  ========================  ==================  ======================================

Seeds (record in ``vectors/pma/README.md``):

* PRBS13Q: the IEEE 802.3 COM script (``com_ieee8023_93a``, function ``PRBS13Q``; read in the public
  mirrors ``Omer-Sella/802.3`` ``COM/COM_MATLAB/PRBS13Q.m`` and ``tbermen/SiCoPR``, whose tests pin the
  Octave output) seeds its LFSR with ``[0 0 0 0 0 1 0 1 0 1 0 1 1]`` (= our S0..S12, S0 newest), and an
  independent Julia implementation citing Figure 94-6 / 120.5.11.2.1 uses the same register value.
  The COM LFSR emits its 13 seed bits first; ours emits the next bit, so COM's bit stream is
  ``reversed(seed) + prbs_bits(seed)`` (checked bit-exact over the whole period by the tests, with
  COM's pinned level counts and SHA-256). Vendors list PRBS13Q "lane 0..3" variants, so the standard
  probably gives per-lane seeds; their values were not found: every lane uses the lane-0 seed [?].
* PRBS31Q: the PRBS31 generator of Clause 49 (Figure 49-9) has an inverter at its output [S] (a public
  SSPRQ implementation that reproduces IEEE's machine-readable SSPRQ file relies on it). No seed for
  the plain PRBS31Q pattern was found [?]; the default stays all ones. ``--state``/``seed`` overrides.

Both polynomials are primitive (checked in the tests), so PRBS13Q repeats every 8191 symbols and
PRBS31Q every 2^31 - 1 symbols (two bit periods each, since the bit period is odd).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phy802.pma._kernels import lfsr_kernel
from phy802.pma.pam4 import gray_map

__all__ = ["PrbsPattern", "PATTERNS", "prbs_bits", "prbsq", "parse_seed"]


@dataclass(frozen=True, slots=True)
class PrbsPattern:
    """A PRBS generator: ``exponents`` are the non-constant terms of the polynomial (highest first)."""

    name: str
    exponents: tuple[int, ...]
    seed: str  # S0..S(N-1), S0 leftmost
    invert: bool = False  # output inverter (Figure 49-9)

    @property
    def degree(self) -> int:
        return self.exponents[0]

    @property
    def polynomial(self) -> str:
        return " + ".join([("x" if e == 1 else f"x^{e}") for e in self.exponents] + ["1"])

    @property
    def bit_period(self) -> int:
        return 2**self.degree - 1


PATTERNS: dict[str, PrbsPattern] = {
    "prbs9q": PrbsPattern("prbs9q", (9, 5), "1" * 9),
    "prbs13q": PrbsPattern("prbs13q", (13, 12, 2, 1), "0000010101011"),
    "prbs31q": PrbsPattern("prbs31q", (31, 28), "1" * 31, invert=True),
}


def _pattern(pattern: str | PrbsPattern) -> PrbsPattern:
    if isinstance(pattern, PrbsPattern):
        return pattern
    key = str(pattern).lower()
    if key not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r} (choose from {', '.join(PATTERNS)})")
    return PATTERNS[key]


def parse_seed(seed: str | np.ndarray | None, degree: int) -> np.ndarray:
    """A seed ``'S0S1...'`` (string of 0/1) or bit array of length ``degree``; not all zeros."""
    if isinstance(seed, str):
        if len(seed) != degree or set(seed) - {"0", "1"}:
            raise ValueError(f"seed must be {degree} characters of 0/1 (S0 first), got {seed!r}")
        bits = np.array([int(c) for c in seed], dtype=np.uint8)
    else:
        bits = np.asarray(seed)
        if bits.shape != (degree,) or bits.dtype.kind not in "biu" or np.any((bits != 0) & (bits != 1)):
            raise ValueError(f"seed must be {degree} bits, got {seed!r}")
        bits = bits.astype(np.uint8)
    if not bits.any():
        raise ValueError("seed must not be all zeros (the LFSR would stay at zero)")
    return bits


def prbs_bits(pattern: str | PrbsPattern, count: int, seed: str | np.ndarray | None = None) -> np.ndarray:
    """The first ``count`` output bits of the pattern's PRBS (``uint8``; inverted where the pattern's
    generator has an output inverter). ``seed`` ``None`` = the pattern's default seed."""
    p = _pattern(pattern)
    if int(count) < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    state = parse_seed(p.seed if seed is None else seed, p.degree).copy()
    taps = np.array([e - 1 for e in p.exponents], dtype=np.int64)
    out = np.empty(int(count), dtype=np.uint8)
    lfsr_kernel(state, taps, out)
    if p.invert:
        np.bitwise_xor(out, 1, out=out)
    return out


def prbsq(pattern: str | PrbsPattern, count: int, seed: str | np.ndarray | None = None) -> np.ndarray:
    """The first ``count`` PAM4 symbols of PRBS9Q/13Q/31Q (``uint8`` level indices). 120.5.11.2"""
    return gray_map(prbs_bits(pattern, 2 * int(count), seed))
