"""Clause 120 PAM4 PMA: Gray map, 1/(1+D) mod 4 precoder, PCS-lane bit-mux, PRBSxQ test patterns.
Owns the bits <-> PAM4 symbols step between the PCS lanes and the channel.

Symbols are PAM4 level indices ``0..3`` (increasing amplitude, ``uint8``); bits are ``uint8`` 0/1.
"""

from phy802.pma.bitmux import BitMux, lane_bit_to_pcsl
from phy802.pma.pam4 import LEVELS, bit_error_positions, gray_demap, gray_map
from phy802.pma.precoder import precode, precode_decode, precoded_errors_to_data_errors
from phy802.pma.prbs import PATTERNS, PrbsPattern, prbs_bits, prbsq

__all__ = [
    "LEVELS",
    "gray_map",
    "gray_demap",
    "bit_error_positions",
    "precode",
    "precode_decode",
    "precoded_errors_to_data_errors",
    "BitMux",
    "lane_bit_to_pcsl",
    "PATTERNS",
    "PrbsPattern",
    "prbs_bits",
    "prbsq",
]
