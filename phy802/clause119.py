"""Clause 119 geometry: the sizes of the 400GBASE-R / 200GBASE-R PCS and its RS(544,514) FEC.

Each number is defined here once; every module that needs one imports it from here (Numba
kernels too: a module-level constant is frozen into the compiled code, which is right for these).
Sources: IEEE 802.3bs Clause 119 (sections cited per line); the 200G AM spacing is inferred ([I])
as the one that keeps 400G's per-lane spacing.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

__all__ = ["SYMBOL_BITS", "KP4_N", "KP4_K", "KP4_T", "BLOCK_BITS", "BLOCK_PAYLOAD_BITS", "BLOCKS_PER_PAIR",
           "PAIR_MESSAGE_BITS", "PAIR_LINE_BITS", "CODEWORD_LINE_BITS", "RATES", "PCS_LANES", "PHYSICAL_LANES",
           "AM_SPACING_BLOCKS", "pcs_lanes", "CodeSize", "CODE_SIZES"]

SYMBOL_BITS = 10  # RS symbols are elements of GF(2^10) (119.2.4.6)
KP4_N = 544  # RS(544,514) "KP4": symbols per codeword (119.2.4.6)
KP4_K = 514  # message symbols per codeword
KP4_T = (KP4_N - KP4_K) // 2  # 15 symbol errors corrected
BLOCK_BITS = 257  # 256b/257b transcoded block (119.2.4.2)
BLOCK_PAYLOAD_BITS = 256
BLOCKS_PER_PAIR = 40  # 257b blocks per codeword pair: 40 x 257 = 10280 = 2 x 514 x 10 (119.2.4.5)
PAIR_MESSAGE_BITS = BLOCKS_PER_PAIR * BLOCK_BITS  # 10280: message bits of a codeword pair
PAIR_LINE_BITS = 2 * KP4_N * SYMBOL_BITS  # 10880: line bits of a codeword pair
CODEWORD_LINE_BITS = KP4_N * SYMBOL_BITS  # 5440

RATES: tuple[str, ...] = ("400G", "200G")
#: PCS lanes per rate; codeword pairs are distributed over them symbol by symbol (119.2.4.7)
PCS_LANES: Mapping[str, int] = MappingProxyType({"400G": 16, "200G": 8})
#: physical lanes a rate uses by default: 8 x 53.125 Gb/s PAM4 at 400G (425 Gb/s), 4 at 200G
PHYSICAL_LANES: Mapping[str, int] = MappingProxyType({"400G": 8, "200G": 4})
#: 257b blocks from one alignment-marker group to the next: 4096 codeword pairs at 400G (119.2.4.4),
#: 2048 at 200G ([I], the same per-lane spacing)
AM_SPACING_BLOCKS: Mapping[str, int] = MappingProxyType({"400G": 163840, "200G": 81920})



class CodeSize(NamedTuple):
    """The sizes of an RS code as the line carries it (10-bit symbols)."""

    n: int  #: codeword symbols
    k: int  #: message symbols
    data_symbols: int  #: message symbols carrying the 257b stream (the rest are pad)
    blocks_per_pair: int  #: 257b blocks per codeword pair (two codewords A and B)

    @property
    def t(self) -> int:
        """Symbol errors corrected."""
        return (self.n - self.k) // 2


#: the RS codes a line carries: Clause 119's KP4; Clause 91's RS(528,514) "KR4" (the same 514
#: message symbols); the Ethernet Consortium's low-latency RS(272,257+1), framed as Clause 119
#: frames KP4 but with ten 257b blocks and one pad symbol per codeword
CODE_SIZES: Mapping[str, CodeSize] = MappingProxyType({
    "kp4": CodeSize(KP4_N, KP4_K, KP4_K, BLOCKS_PER_PAIR),
    "kr4": CodeSize(528, KP4_K, KP4_K, BLOCKS_PER_PAIR),
    "rs272": CodeSize(272, 258, 257, BLOCKS_PER_PAIR // 2),
})


def pcs_lanes(rate: str) -> int:
    """PCS lanes of a Clause 119 rate (16 at 400G, 8 at 200G); ValueError naming any other rate."""
    try:
        return PCS_LANES[rate]
    except (KeyError, TypeError):
        raise ValueError(f"rate must be '400G' or '200G', got {rate!r}") from None
