"""The FEC codec: Reed-Solomon of IEEE 802.3 (Clause 91 / 119) and the Clause 177 inner code
(:mod:`.inner`); histogram telemetry lives in :mod:`phy802.telemetry`.

Codes: RS(544,514) "KP4", RS(528,514) "KR4", and the Ethernet Consortium's low-latency
RS(272,257+1) "rs272" (``CODES`` / ``code_by_name``).

GF(2^10) with p(x) = x^10 + x^3 + 1, generator roots alpha^0..alpha^(2t-1), systematic, first
message symbol = coefficient of x^(n-1), parity last. Batched numpy API over Numba kernels::

    from phy802.fec import KP4, encode, decode
    words = encode(KP4, msgs)              # uint16[..., 514] -> uint16[..., 544]
    fixed, n_corr = decode(KP4, received)  # n_corr = symbols corrected, -1 = uncorrectable

With the sent word known only the error pattern matters (linearity):
``syndromes_sparse(KP4, positions, values)`` gives the syndromes from the error list alone and
``error_pattern_outcome(KP4, positions, values)`` says what the decoder would do (0 = back to the
sent word, 1 = flagged uncorrectable, 2 = miscorrected) without building any word; patterns of
weight <= t are answered without decoding. Known-answer files: :mod:`phy802.fec.vectors`;
counters: :class:`FecCounters`; CLI: ``phy802 fec encode|decode``.
"""

from .counters import FecCounters
from .rs import (
    CODE_NAMES,
    CODES,
    KP4,
    KR4,
    RS272,
    code_by_name,
    RSCode,
    decode,
    decode_syndromes,
    encode,
    error_pattern_outcome,
    is_codeword,
    syndromes,
    syndromes_sparse,
)

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
    "FecCounters",
]
