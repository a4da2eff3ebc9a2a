"""Configuration of the Clause 119 PCS model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from phy802.clause119 import AM_SPACING_BLOCKS, CODE_SIZES, RATES, pcs_lanes
from phy802.pcs.alignment import am_group_len, am_table, pad_len
from phy802.pcs.scrambler import DEFAULT_SEED

__all__ = ["PcsConfig"]


@dataclass(frozen=True, slots=True)
class PcsConfig:
    """Structure of a 400GBASE-R / 200GBASE-R PCS (Clause 119).

    Parameters
    ----------
    rate : ``"400G"`` (16 PCS lanes) or ``"200G"`` (8 PCS lanes).
    fec : the RS code: ``"kp4"`` (RS(544,514), Clause 119, default) or ``"rs272"`` (the Ethernet
        Consortium low-latency RS(272,257+1), t = 7): each codeword carries ten 257b
        blocks (257 symbols, dealt 10-bit round robin A/B as in 119.2.4.5 over a 20-block pair)
        plus one 10-bit pad symbol, and the 119.2.4.7 interleave takes n = 272 (34 / 68 symbols
        per lane and pair).  Everything else (257b, scrambler, AM groups every ``am_spacing``
        blocks, lane lock) is unchanged.
    decode_mode : ``"correct"`` (default), ``"detect"`` (syndrome check only, data passed
        uncorrected, codewords with errors counted as uncorrected and marked), ``"bypass"`` (no
        decoding at all: parity ignored, nothing marked).
    am_spacing : 257b blocks from one AM group to the next, AM blocks included; must be a multiple
        of 40 (one KP4 codeword pair, two rs272 pairs).  Default 163840 (400G, [C]) or 81920 (200G, [I]).
    scrambler_seed : 58-bit initial scrambler state (see :mod:`phy802.pcs.scrambler`); the receiver
        uses the same value as its initial descrambler history.
    prbs9_seed : initial state of the AM pad PRBS9 (default all ones, [?]).
    am_status : the 3 status bits ``tx_am_sf<2:0>`` sent in every AM group.
    error_marking : what the receiver does with the 66b blocks of a codeword pair in which a
        codeword is uncorrectable (rule [?]): ``"pair"`` (default) sets the sync header of every
        66b block carried by that pair to ``11``, so they decode as error blocks; ``"none"`` passes
        them on unmarked (like bypass indication).
    am_lanes_200g : which 400G marker rows the 8 200G lanes use ([?]; default rows 0..7).
    am_table : optional explicit marker table (rows of 15 octets); overrides the built-in one.
    am_lock_tolerance : receiver lane lock accepts a marker with up to this many of its 12
        symbols in error (0..5; [?] the standard's exact match rule is not modelled).
    pad_position, pad_value : ``rs272`` only ([?] in the notes, our choice): the pad symbol is the
        last message symbol of each codeword (after the ten blocks, just before the parity), with
        value ``pad_value`` (default 0; the receiver ignores it).  ``"first"`` is refused here: a
        pad among the first 96 message symbols would push the alignment markers off the start of
        the PCS lanes (119.2.4.7 puts message symbols 0..95 of A and B first on every lane), so
        lane lock would fail; :class:`phy802.link.LinkConfig` accepts it at the codeword level.
    """

    rate: Literal["400G", "200G"] = "400G"
    fec: Literal["kp4", "rs272"] = "kp4"
    decode_mode: Literal["correct", "detect", "bypass"] = "correct"
    am_spacing: int | None = None
    scrambler_seed: int = DEFAULT_SEED
    prbs9_seed: int = 0x1FF
    am_status: int = 0
    error_marking: Literal["pair", "none"] = "pair"
    am_lanes_200g: tuple[int, ...] = tuple(range(8))
    am_table: tuple[bytes, ...] | None = None
    am_lock_tolerance: int = 3
    pad_position: Literal["first", "last"] = "last"
    pad_value: int = 0

    def __post_init__(self) -> None:
        if self.rate not in RATES:
            raise ValueError(f"PcsConfig.rate must be '400G' or '200G', got {self.rate!r}")
        if self.fec not in ("kp4", "rs272"):
            raise ValueError(f"PcsConfig.fec must be 'kp4' (RS(544,514), Clause 119) or 'rs272' (RS(272,257+1)), "
                             f"got {self.fec!r}")
        if self.pad_position == "first":
            raise ValueError("PcsConfig.pad_position='first' would move the alignment markers off the start of "
                             "the PCS lanes (the first 96 message symbols of A and B lead every lane); use 'last'")
        if self.pad_position != "last":
            raise ValueError(f"PcsConfig.pad_position must be 'last', got {self.pad_position!r}")
        if isinstance(self.pad_value, bool) or not isinstance(self.pad_value, int) or not 0 <= self.pad_value < 1024:
            raise ValueError(f"PcsConfig.pad_value must be a 10-bit int (0..1023), got {self.pad_value!r}")
        if self.decode_mode not in ("correct", "detect", "bypass"):
            raise ValueError(f"PcsConfig.decode_mode must be correct|detect|bypass, got {self.decode_mode!r}")
        if self.error_marking not in ("pair", "none"):
            raise ValueError(f"PcsConfig.error_marking must be 'pair' or 'none', got {self.error_marking!r}")
        sp = self.spacing
        if sp < 40 or sp % 40:
            raise ValueError(f"PcsConfig.am_spacing must be a positive multiple of 40 257b blocks, got {sp}")
        if not 0 <= self.scrambler_seed < (1 << 58):
            raise ValueError(f"PcsConfig.scrambler_seed must be a 58-bit value, got {self.scrambler_seed:#x}")
        if not 0 < self.prbs9_seed < 512:
            raise ValueError(f"PcsConfig.prbs9_seed must be a nonzero 9-bit value, got {self.prbs9_seed}")
        if not 0 <= self.am_status < 8:
            raise ValueError(f"PcsConfig.am_status must be a 3-bit value, got {self.am_status}")
        if not 0 <= self.am_lock_tolerance <= 5:
            raise ValueError(f"PcsConfig.am_lock_tolerance must be 0..5, got {self.am_lock_tolerance}")
        self.markers  # validates the table (invariants)

    @property
    def n_lanes(self) -> int:
        return pcs_lanes(self.rate)

    @property
    def spacing(self) -> int:
        """AM spacing in 257b blocks."""
        if self.am_spacing is not None:
            return int(self.am_spacing)
        return AM_SPACING_BLOCKS[self.rate]

    @property
    def code(self):
        """The :class:`phy802.fec.RSCode` (KP4 or RS272)."""
        from phy802.fec import code_by_name

        return code_by_name(self.fec)

    @property
    def blocks_per_pair(self) -> int:
        """257b blocks per codeword pair: 40 (KP4), 20 (rs272)."""
        return CODE_SIZES[self.fec].blocks_per_pair

    @property
    def data_symbols(self) -> int:
        """Message symbols per codeword that carry the 257b stream: 514, or 257 (rs272)."""
        return CODE_SIZES[self.fec].data_symbols

    @property
    def pad_index(self) -> int | None:
        """Message position of the rs272 pad symbol (None for KP4)."""
        if self.fec == "kp4":
            return None
        return self.data_symbols if self.pad_position == "last" else 0

    @property
    def period_pairs(self) -> int:
        """Codeword pairs from one AM group to the next."""
        return self.spacing // self.blocks_per_pair

    @property
    def am_blocks(self) -> int:
        """257b blocks taken by one AM group (8 or 4)."""
        return self.n_lanes // 2

    @property
    def am_bits(self) -> int:
        return am_group_len(self.n_lanes)

    @property
    def pad_bits(self) -> int:
        return pad_len(self.n_lanes)

    @property
    def symbols_per_pair(self) -> int:
        """Symbols each PCS lane carries per codeword pair (68 or 136; rs272: 34 or 68)."""
        return 2 * self.code.n // self.n_lanes

    @property
    def markers(self) -> tuple[bytes, ...]:
        return am_table(self.rate, self.am_lanes_200g, self.am_table)

    def data_blocks_257(self, n_pairs: int) -> int:
        """257b data blocks carried by the first ``n_pairs`` pairs (pair 0 starts with an AM group)."""
        n_am = -(-n_pairs // self.period_pairs)
        return self.blocks_per_pair * n_pairs - self.am_blocks * n_am

    def pairs_for_blocks66(self, n66: int) -> int:
        """Smallest number of pairs that carries ``n66`` 66b blocks."""
        need = -(-n66 // 4)
        bpp = self.blocks_per_pair
        per = bpp * self.period_pairs - self.am_blocks
        full = need // per
        rem = need - full * per
        p = full * self.period_pairs
        if rem:
            p += -(-(rem + self.am_blocks) // bpp)
        return max(p, 1)
