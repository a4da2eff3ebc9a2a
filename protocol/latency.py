"""Added receive latency of each (code, receive mode), per rate.

The added latency of a mode is what its receive path adds on top of a PHY without FEC:

* **accumulation**: a decoder that corrects, or that marks a codeword before releasing it, must
  hold the data until the whole codeword (400G/200G: the interleaved codeword *pair*, 119.2.4.7)
  has arrived.  Worst case, for the first symbol of a pair: the pair's line bits over the line
  rate (mean over symbols: half of it).  KP4: 2 x 5440 / 425 Gb/s = **25.6 ns** at 400G, 51.2 ns
  at 200G (notes section 7, [I] lower bound).
* **decoder pipeline**: syndromes finish a few cycles after the last symbol, then the key
  equation solver (Berlekamp-Massey, 2t = 30 steps for KP4), Chien search and Forney.  Defaults:
  a 1 GHz clock and 31 cycles for syndrome + solver + Chien/Forney, the figure 802.3dj planning
  assumed for correction (performance notes, "~31 cycles at 1 GHz"); the split 3 / 20 / 8 is
  ours [I].  Published totals of ~100 ns for 100G RS-FEC are not verified (notes section 7).

Codes (``code=``).  The MAC rate is fixed, so a code's line rate carries its overhead
(:meth:`protocol.framing.CodeGeometry.line_gbps`) and **accumulation = pair line bits / that line
rate**:

==========  ========  ===========  ================  ===========================================
code        n         line (400G)  pair time (400G)  note
==========  ========  ===========  ================  ===========================================
``kp4``     544       425 Gb/s     25.6 ns           Cl.119
``kr4``     528       412.5 Gb/s   25.6 ns           the same 2 x 514 message symbols per pair,
                                                     so the same time (as at 100G: 51.2 ns for
                                                     both, notes section 7)
``rs272``   272       425 Gb/s     12.8 ns           half the pair: "cuts FEC latency
                                                     approximately in half" (tradeoff notes sec.1)
``none``    --        --           0                 no FEC sublayer: nothing to wait for
==========  ========  ===========  ================  ===========================================

Decoder cycles scale with the code [I]: ``solver_cycles`` is for t = 15 (KP4) and scales with
t / 15 (Berlekamp-Massey runs 2t steps), ``chien_forney_cycles`` is for n = 544 and scales with
n / 544 (the Chien search visits every position at a fixed parallel width); each rounded up to
whole cycles.  Syndrome, indication, zero-test and first-output cycles do not depend on the code
(the syndromes finish a fixed pipeline depth after the last symbol).  ``scale_with_code=False``
keeps the KP4 cycle counts for every code.

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
``llr``                    as ``ieee`` (link-level retry adds nothing to a good frame); a frame
                           that fails costs one link round trip, ``retry_ns`` (below)
=========================  =================================================================

With ``code="none"`` every mode costs what ``bypass`` costs, except ``unequal`` (its own short
code on the protected field still applies).

**Link-level retry round trip** (``LatencyBreakdown.retry_ns``, ``llr`` only; tradeoff notes
sec.2, details [?]): the receiver's NAK travels back and the replayed frame travels forth, each
way paying the fibre, the PHY pipelines besides the FEC, and the mode's added FEC latency, plus
the replay logic: ``retry_ns = 2 (llr_fiber_m x fiber_ns_per_m + llr_phy_ns + total_ns) +
llr_replay_ns``.  Defaults [I]: 10 m of fibre at 5 ns/m (notes sec.3), 100 ns of other PHY/MAC
pipeline each way, 50 ns of replay logic: 465.2 ns for KP4 at 400G.  The frame's own
re-serialisation is not included (the caller knows the frame size).  Other modes' resends are
end to end (transport go-back-N), costed by the collective model, not here (``retry_ns = 0``).

**800G and 1.6T (802.3dj).**  :data:`INNER_RATES`: 800G = 4 lanes, 1.6T = 8 lanes of
200G; the outer code stays KP4 with **X = 4** codewords interleaved [S] (dj notes), so the outer
accumulation is ``4 x 5440 / 850 Gb/s = 25.6 ns`` at 800G and 12.8 ns at 1.6T (KP4 line rates
850 / 1700 Gb/s before the inner code) and the KP4 decoder cycles are as above.  Optical 200G
lanes add the **Clause 177 inner FEC** (``inner="c177"``, the default at these rates;
``inner="none"`` for a PMD without it or with it bypassed): accumulation of one 128-bit block at
the lane rate ``212.5 x 128/120 = 226.67 Gb/s`` (0.56 ns), plus ``inner_hard_cycles`` (default 2)
or ``inner_chase_cycles`` (default 4, Chase-2 with 4 test patterns) decoder cycles [I], plus
``inner_interleave_ns`` for any symbol interleaver in front of it (default 0: the notes give no
figure, [?]).  The inner part is ``LatencyBreakdown.inner_ns``, included in ``total_ns``.  It is
per optical hop; :func:`path_latency` adds hops up with the outer code ``segmented`` (each hop
terminates KP4: outer latency per hop) or ``end_to_end`` (KP4 once, at the far end).
400G/200G have no inner code (``inner="c177"`` there raises ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass

import math

from .framing import BLOCK_BITS, CODES, RATES, RS_N, get_code, get_rate
from .modes import MODE_NAMES, get_mode

CODE_NAMES: tuple[str, ...] = tuple(CODES)  # kp4, kr4, rs272, none
_KP4_T = 15

__all__ = ["LatencyConfig", "LatencyBreakdown", "added_latency", "latency_table", "INNER_RATES", "ALL_RATES",
           "INNER_CODES", "InnerRate", "path_latency"]


@dataclass(frozen=True, slots=True)
class InnerRate:
    """An 802.3dj 200G-per-lane rate: ``n_lanes`` physical lanes, KP4 line rate ``line_gbps``
    (before the inner code), ``interleave`` KP4 codewords interleaved (X = 4 [S])."""

    name: str
    n_lanes: int
    line_gbps: float
    interleave: int = 4

    @property
    def outer_accumulation_ns(self) -> float:
        """X KP4 codewords' line bits over the KP4 line rate (25.6 ns at 800G, 12.8 ns at 1.6T)."""
        return self.interleave * RS_N * 10 / self.line_gbps

    @property
    def lane_gbps_inner(self) -> float:
        """Per-lane line rate with the Clause 177 inner code (x 128/120): 226.67 Gb/s."""
        return self.line_gbps / self.n_lanes * 128.0 / 120.0


#: the 200G-per-lane rates (dj notes [C]: 800G over 4 lanes, 1.6T over 8)
INNER_RATES: dict[str, InnerRate] = {"800G": InnerRate("800G", 4, 850.0), "1.6T": InnerRate("1.6T", 8, 1700.0)}
#: every rate :func:`added_latency` knows
ALL_RATES: tuple[str, ...] = tuple(RATES) + tuple(INNER_RATES)
INNER_CODES: tuple[str, ...] = ("c177", "none")


def _inner_rate(rate) -> InnerRate | None:
    key = str(rate).strip().upper()
    return INNER_RATES.get(key)


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    """Decoder pipeline parameters (cycles of a ``clock_ghz`` clock) and the LLR round trip.

    Defaults total 31 cycles at 1 GHz for full KP4 correction (802.3dj planning figure,
    performance notes); the split between stages is our assumption [I].  ``solver_cycles`` (t = 15)
    and ``chien_forney_cycles`` (n = 544) scale with the code unless ``scale_with_code`` is off
    (module docstring).  ``llr_*`` and ``fiber_ns_per_m`` set the link round trip of ``llr``.
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
    scale_with_code: bool = True
    fiber_ns_per_m: float = 5.0
    llr_fiber_m: float = 10.0
    llr_phy_ns: float = 100.0
    llr_replay_ns: float = 50.0
    inner_hard_cycles: int = 2
    inner_chase_cycles: int = 4
    inner_interleave_ns: float = 0.0

    def __post_init__(self) -> None:
        if not self.clock_ghz > 0:
            raise ValueError(f"LatencyConfig.clock_ghz must be > 0, got {self.clock_ghz!r}")
        for name in ("syndrome_cycles", "solver_cycles", "chien_forney_cycles", "indication_cycles",
                     "zero_test_cycles", "first_output_cycles", "uep_block_bits", "uep_cycles",
                     "inner_hard_cycles", "inner_chase_cycles"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"LatencyConfig.{name} must be a non-negative int, got {v!r}")
        for name in ("bypass_ns", "fiber_ns_per_m", "llr_fiber_m", "llr_phy_ns", "llr_replay_ns", "inner_interleave_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"LatencyConfig.{name} must be a finite number >= 0, got {v!r}")
        if not isinstance(self.scale_with_code, bool):
            raise ValueError(f"LatencyConfig.scale_with_code must be a bool, got {self.scale_with_code!r}")

    def ns(self, cycles: int) -> float:
        return cycles / self.clock_ghz

    def solver(self, t: int) -> int:
        """Key-equation solver cycles for a code of capability ``t``."""
        return -(-self.solver_cycles * t // _KP4_T) if self.scale_with_code else self.solver_cycles

    def chien_forney(self, n: int) -> int:
        """Chien search + Forney cycles for a code of length ``n``."""
        return -(-self.chien_forney_cycles * n // RS_N) if self.scale_with_code else self.chien_forney_cycles


@dataclass(frozen=True, slots=True)
class LatencyBreakdown:
    """Added latency of one (code, mode) at one rate, in ns (``total = accumulation + decoder``).

    ``retry_ns``: the link round trip a failed frame costs in ``llr`` (0 in the other modes, whose
    resends are end to end; module docstring).
    """

    rate: str
    mode: str
    accumulation_ns: float
    decoder_ns: float
    total_ns: float
    mean_accumulation_ns: float
    code: str = "kp4"
    retry_ns: float = 0.0
    inner: str = "none"
    inner_ns: float = 0.0

    @property
    def outer_ns(self) -> float:
        """The outer (RS) part: ``total_ns - inner_ns``."""
        return self.total_ns - self.inner_ns

    @property
    def mean_total_ns(self) -> float:
        """Average over the symbols of a pair (the first waits the whole pair, the last none); the
        inner FEC part (800G/1.6T) is added whole."""
        return self.mean_accumulation_ns + self.decoder_ns + self.inner_ns


def _inner_part(ir: InnerRate, inner: str, inner_decoder: str, cfg: LatencyConfig) -> float:
    if inner == "none":
        return 0.0
    if inner_decoder not in ("hard", "chase"):
        raise ValueError(f"inner_decoder must be 'hard' or 'chase', got {inner_decoder!r}")
    cycles = cfg.inner_hard_cycles if inner_decoder == "hard" else cfg.inner_chase_cycles
    return 128.0 / ir.lane_gbps_inner + cfg.ns(cycles) + cfg.inner_interleave_ns


def added_latency(mode: str, rate: str = "400G", cfg: LatencyConfig = LatencyConfig(),
                  code: str = "kp4", inner: str | None = None, inner_decoder: str = "chase") -> LatencyBreakdown:
    """Added latency of ``mode`` with ``code`` at ``rate`` (see the module docstring for the model).

    ``inner``: the Clause 177 inner code (``"c177"``, default at 800G/1.6T) or ``"none"`` (default
    at 400G/200G, the only value allowed there); ``inner_decoder``: ``"hard"`` or ``"chase"``.

    >>> round(added_latency("ieee").total_ns, 3), round(added_latency("ieee", code="rs272").total_ns, 3)
    (57.6, 30.8)
    >>> round(added_latency("ieee", "800G").total_ns, 3), round(added_latency("ieee", "800G").inner_ns, 3)
    (62.165, 4.565)
    """
    m = get_mode(mode)
    if not isinstance(cfg, LatencyConfig):
        raise TypeError(f"cfg must be a LatencyConfig, got {type(cfg).__name__}")
    ir = _inner_rate(rate)
    if inner is None:
        inner = "c177" if ir is not None else "none"
    if inner not in INNER_CODES:
        raise ValueError(f"unknown inner code {inner!r}; choose from {', '.join(INNER_CODES)}")
    if ir is None and inner != "none":
        raise ValueError(f"rate {rate!r} has no inner code: Clause 177 ({inner}) is for the 200G-per-lane rates "
                         f"{', '.join(INNER_RATES)}")
    c = get_code(code)
    if ir is not None:
        if c.name not in ("kp4", "none"):
            raise ValueError(f"code {code!r} at {ir.name}: 802.3dj keeps RS(544,514) (kp4) as the outer code; "
                             f"choose kp4 or none")
        g = None
        pair_ns = 0.0 if c.name == "none" else ir.outer_accumulation_ns
        rate_name = ir.name
    else:
        g = get_rate(rate)
        pair_ns = c.pair_ns(g)
        rate_name = g.name
    t = c.t
    name = m.name if c.name != "none" or m.name == "unequal" else "bypass"
    if name in ("ieee", "llr"):
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.solver(t) + cfg.chien_forney(c.n) + cfg.indication_cycles)
    elif name == "correct_no_indication":
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.solver(t) + cfg.first_output_cycles)
    elif name == "detect_only":
        acc = pair_ns
        dec = cfg.ns(cfg.syndrome_cycles + cfg.zero_test_cycles)
    elif name == "bypass":
        acc = 0.0
        dec = cfg.bypass_ns
    elif name == "unequal":
        # the protected field rides on its own short code; the line carries it at line rate
        acc = cfg.uep_block_bits / (c.line_gbps(g) if g is not None else ir.line_gbps)
        dec = cfg.ns(cfg.uep_cycles)
    else:  # pragma: no cover - get_mode only returns known modes
        raise ValueError(f"no latency model for mode {m.name!r}")
    inner_ns = _inner_part(ir, inner, inner_decoder, cfg) if ir is not None else 0.0
    total = acc + dec + inner_ns
    retry = 0.0
    if m.retry == "link":
        retry = 2.0 * (cfg.llr_fiber_m * cfg.fiber_ns_per_m + cfg.llr_phy_ns + total) + cfg.llr_replay_ns
    return LatencyBreakdown(rate_name, m.name, acc, dec, total, acc / 2, c.name, retry, inner, inner_ns)


def latency_table(rates=tuple(RATES), modes=MODE_NAMES, cfg: LatencyConfig = LatencyConfig(),
                  codes=("kp4",), inner: str | None = None, inner_decoder: str = "chase") -> list[LatencyBreakdown]:
    """Added latency for every (rate, code, mode), rate-major then code then mode.  At 800G/1.6T
    only ``kp4``/``none`` apply (other codes are skipped there); ``inner`` as in :func:`added_latency`
    (``None``: c177 at 800G/1.6T, none elsewhere)."""
    out = []
    for r in rates:
        dj = _inner_rate(r) is not None
        for c in codes:
            if dj and c not in ("kp4", "none"):
                continue
            inn = inner if (inner is not None and dj) else None
            out += [added_latency(m, r, cfg, code=c, inner=inn, inner_decoder=inner_decoder) for m in modes]
    return out


def path_latency(mode: str, rate: str, hops: int, outer: str = "segmented", cfg: LatencyConfig = LatencyConfig(),
                 code: str = "kp4", inner: str | None = None, inner_decoder: str = "chase") -> float:
    """FEC latency (ns) of a path of ``hops`` optical hops: the inner part is paid on every hop; the
    outer part on every hop when ``segmented`` (each hop terminates KP4), once when ``end_to_end``."""
    if outer not in ("segmented", "end_to_end"):
        raise ValueError(f"outer must be 'segmented' or 'end_to_end', got {outer!r}")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise ValueError(f"hops must be an int >= 1, got {hops!r}")
    b = added_latency(mode, rate, cfg, code=code, inner=inner, inner_decoder=inner_decoder)
    return hops * b.inner_ns + (hops if outer == "segmented" else 1) * b.outer_ns
