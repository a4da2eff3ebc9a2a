"""Added receive latency of each FEC mode, per rate.

The added latency of a mode is what its receive path adds on top of a PHY without FEC:

* **accumulation**: a decoder that corrects, or that marks a codeword before releasing it, must
  hold the data until the whole codeword (400G/200G: the interleaved codeword *pair*, 119.2.4.7)
  has arrived.  Worst case, for the first symbol of a pair: 2 x 5440 / 425 Gb/s = **25.6 ns** at
  400G, 51.2 ns at 200G (notes section 7, [I] lower bound; mean over symbols is half of it).
* **decoder pipeline**: syndromes finish a few cycles after the last symbol, then the key
  equation solver (Berlekamp-Massey, 2t = 30 steps), Chien search and Forney.  Defaults: a 1 GHz
  clock and 31 cycles for syndrome + solver + Chien/Forney, the figure 802.3dj planning assumed for
  correction (performance notes, "~31 cycles at 1 GHz"); the split 3 / 20 / 8 is ours [I].
  Published totals of ~100 ns for 100G RS-FEC are not verified (notes section 7).

Per mode (all components configurable through :class:`LatencyConfig`):

=========================  =================================================================
``ieee``                   accumulation + syndrome + solver + Chien/Forney + indication check
``correct_no_indication``  accumulation + syndrome + solver + first Chien/Forney step: without
                           the uncorrectable check (Chien root count == degree) the decoder
                           streams corrections out as the Chien search proceeds (91.5.3.3) [I]
``detect_only``            accumulation + syndrome + zero test (91.5.3.3 bypass correction)
``bypass``                 0 (parity is stripped as it arrives; the 119.2.4.7 de-interleave
                           needs no buffering beyond a row, which an FEC-less PHY also has) [I]
``unequal``                a short code on the sign/exponent field: its own block accumulation
                           (``uep_block_bits``, default one 257b block) + ``uep_cycles`` [I]
=========================  =================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from .framing import BLOCK_BITS, PAIR_LINE_BITS, RATES, get_rate
from .modes import MODE_NAMES, get_mode

__all__ = ["LatencyConfig", "LatencyBreakdown", "added_latency", "latency_table"]


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    """Decoder pipeline parameters (cycles of a ``clock_ghz`` clock).

    Defaults total 31 cycles at 1 GHz for full correction (802.3dj planning figure, performance
    notes); the split between stages is our assumption [I].
    """

    clock_ghz: float = 1.0
    syndrome_cycles: int = 3
    solver_cycles: int = 20
    chien_forney_cycles: int = 8
    indication_cycles: int = 1
    zero_test_cycles: int = 1
    first_output_cycles: int = 1
    uep_block_bits: int = BLOCK_BITS
    uep_cycles: int = 4
    bypass_ns: float = 0.0

    def __post_init__(self) -> None:
        if not self.clock_ghz > 0:
            raise ValueError(f"LatencyConfig.clock_ghz must be > 0, got {self.clock_ghz!r}")
        for name in ("syndrome_cycles", "solver_cycles", "chien_forney_cycles", "indication_cycles",
                     "zero_test_cycles", "first_output_cycles", "uep_block_bits", "uep_cycles"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"LatencyConfig.{name} must be a non-negative int, got {v!r}")
        if self.bypass_ns < 0:
            raise ValueError(f"LatencyConfig.bypass_ns must be >= 0, got {self.bypass_ns!r}")

    def ns(self, cycles: int) -> float:
        return cycles / self.clock_ghz


@dataclass(frozen=True, slots=True)
class LatencyBreakdown:
    """Added latency of one mode at one rate, in ns (``total = accumulation + decoder``)."""

    rate: str
    mode: str
    accumulation_ns: float
    decoder_ns: float
    total_ns: float
    mean_accumulation_ns: float

    @property
    def mean_total_ns(self) -> float:
        """Average over the symbols of a pair (the first waits the whole pair, the last none)."""
        return self.mean_accumulation_ns + self.decoder_ns


def added_latency(mode: str, rate: str = "400G", cfg: LatencyConfig = LatencyConfig()) -> LatencyBreakdown:
    """Added latency of ``mode`` at ``rate`` (see the module docstring for the model)."""
    m = get_mode(mode)
    g = get_rate(rate)
    pair_ns = PAIR_LINE_BITS / g.line_gbps
    if m.name == "ieee":
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.solver_cycles + cfg.chien_forney_cycles + cfg.indication_cycles)
    elif m.name == "correct_no_indication":
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.solver_cycles + cfg.first_output_cycles)
    elif m.name == "detect_only":
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.zero_test_cycles)
    elif m.name == "bypass":
        acc = 0.0
        dec = cfg.bypass_ns
    elif m.name == "unequal":
        # the protected field rides on its own short code; the line carries it at line rate
        acc = cfg.uep_block_bits / g.line_gbps
        dec = cfg.ns(cfg.uep_cycles)
    else:  # pragma: no cover - get_mode only returns known modes
        raise ValueError(f"no latency model for mode {m.name!r}")
    return LatencyBreakdown(g.name, m.name, acc, dec, acc + dec, acc / 2)


def latency_table(rates=tuple(RATES), modes=MODE_NAMES, cfg: LatencyConfig = LatencyConfig()) -> list[LatencyBreakdown]:
    """Added latency for every (rate, mode)."""
    return [added_latency(m, r, cfg) for r in rates for m in modes]
