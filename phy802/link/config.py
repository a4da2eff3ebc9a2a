"""Link configuration: FEC modes, rates, lanes, precoding, mux order (see :mod:`phy802.link`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from phy802.clause119 import KP4_K as K_MSG  # noqa: F401  (the name phy802.link exports)
from phy802.clause119 import PHYSICAL_LANES, RATES, pcs_lanes
from phy802.fec import KP4, RSCode, code_by_name
from phy802.pcs import (
    PcsConfig,
)
from phy802.pma import BitMux


CodeName = Literal["kp4", "kr4", "rs272", "none"]
FecMode = Literal["ieee", "correct_no_indication", "detect_only", "bypass", "unequal", "llr"]
#: the RS codes a line can carry (the ``--code`` vocabulary; ``none`` = no FEC sublayer)
CODE_NAMES: tuple[str, ...] = ("kp4", "kr4", "rs272", "none")
#: receive modes, the same six as :data:`protocol.modes.MODE_NAMES` (this layer cannot import
#: :mod:`protocol`; a test checks the two tables agree)
FEC_MODES: tuple[str, ...] = ("ieee", "correct_no_indication", "detect_only", "bypass", "unequal", "llr")
# what the PHY's decoder does in each mode, and whether it marks (indicates) what it flags
_DECODER = {"ieee": "correct", "correct_no_indication": "correct", "detect_only": "detect", "bypass": None,
            "unequal": None, "llr": "correct"}
_INDICATE = {"ieee": True, "correct_no_indication": False, "detect_only": True, "bypass": False,
             "unequal": False, "llr": True}
# old single-``fec`` spellings (before the code / receive-mode split) -> the new spelling, for the error message
OLD_FEC_SPELLINGS: dict[str, tuple[str, str]] = {
    "kp4": ("kp4", "ieee"), "kr4": ("kr4", "ieee"), "detect": ("kp4", "detect_only"), "none": ("none", "bypass"),
}
_POP10 = np.array([bin(i).count("1") for i in range(1024)], dtype=np.int64)
_CODEWORD_ONLY = ("kr4",)  # no Clause 119 PCS framing (rs272's is in phy802.pcs)


def old_spelling_message(fec: str, where: str = "fec") -> str:
    """The error text for an old ``fec`` value (e.g. ``fec='kp4' is now code='kp4', fec='ieee'``)."""
    code, mode = OLD_FEC_SPELLINGS[fec]
    return f"{where}={fec!r} is an old spelling: it is now code={code!r}, fec={mode!r}"


def code_of(code: str) -> RSCode:
    """The RS code whose layout the line carries for ``code`` (``none``: the KP4 layout, parity
    sent as filler and never read)."""
    if code not in CODE_NAMES:
        raise ValueError(f"code must be one of {', '.join(CODE_NAMES)}, got {code!r}")
    return KP4 if code == "none" else code_by_name(code)


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Structure of a composed link (swept physics lives in the channels, not here).

    Parameters
    ----------
    rate : ``"400G"`` (16 PCS lanes) or ``"200G"`` (8 PCS lanes).
    code : the RS code on the line: ``"kp4"`` (default), ``"kr4"``, ``"rs272"`` or ``"none"``
        (:data:`CODE_NAMES`, module docstring).
    fec : the receive mode (:data:`FEC_MODES`, module docstring), default ``"ieee"``.  With
        ``code="none"`` nothing is decoded whatever the mode.  Old single-``fec`` spellings
        (``kp4``, ``kr4``, ``detect``, ``none``) raise ValueError naming the new spelling.
    precoding : 1/(1+D) mod 4 precoder on every physical lane (120.5.7.2), default off.
    precoder_init : initial precoder state ``P(-1)`` on TX and RX (0..3; [?] in the notes, default 0).
    n_lanes : physical lanes (default 8 for 400G, 4 for 200G); PCS lanes are bit-muxed onto them.
    lane_order : ``lane_order[i]`` = PCS lanes interleaved on physical lane ``i`` (see
        :class:`phy802.pma.BitMux`; default consecutive groups, [?] implementation specific).
    level : ``"pcs"`` (full Clause 119; for ``rs272`` its framing of ten 257b blocks + pad per
        codeword) or ``"codeword"``; default ``"pcs"``, except ``kr4`` (codeword level only).
    payload : ``"data"`` (random 64b data blocks, fastest) or ``"frames"`` (random Ethernet frames
        of ``frame_bytes`` octets + FCS, so FCS errors and frame counts are meaningful).
    frame_bytes : MAC frame length without FCS (default 1514).
    am_spacing : AM group spacing in 257b blocks (``None`` = the standard's; see PcsConfig).
    error_marking : receiver marking of pairs with an uncorrectable codeword (``"pair"``/``"none"``).
    am_lock_tolerance : marker symbols allowed in error at lane lock (0..5, default 5: each batch
        has a single AM group, and a lock failure raises :class:`phy802.pcs.LockError`).
    pad_position, pad_value : ``rs272`` only: where its one 10-bit pad symbol sits in each
        258-symbol message (``"last"``, default: after the ten 257b blocks, just before the parity;
        or ``"first"``, codeword level only: it would push the AMs off the PCS lane starts, see
        :class:`phy802.pcs.PcsConfig`) and its value (default 0).  [?] in the notes; our choice.
    """

    rate: Literal["400G", "200G"] = "400G"
    code: CodeName = "kp4"
    fec: FecMode = "ieee"
    precoding: bool = False
    precoder_init: int = 0
    n_lanes: int | None = None
    lane_order: tuple[tuple[int, ...], ...] | None = None
    level: Literal["pcs", "codeword"] | None = None
    payload: Literal["data", "frames"] = "data"
    frame_bytes: int = 1514
    am_spacing: int | None = None
    error_marking: Literal["pair", "none"] = "pair"
    am_lock_tolerance: int = 5
    pad_position: Literal["first", "last"] = "last"
    pad_value: int = 0

    def __post_init__(self) -> None:
        if self.rate not in RATES:
            raise ValueError(f"LinkConfig.rate must be '400G' or '200G', got {self.rate!r}")
        if self.fec in OLD_FEC_SPELLINGS:
            raise ValueError("LinkConfig: " + old_spelling_message(self.fec))
        if self.fec not in FEC_MODES:
            raise ValueError(f"LinkConfig.fec must be one of {', '.join(FEC_MODES)}, got {self.fec!r}")
        if self.code not in CODE_NAMES:
            raise ValueError(f"LinkConfig.code must be one of {', '.join(CODE_NAMES)}, got {self.code!r}")
        if self.pad_position not in ("first", "last"):
            raise ValueError(f"LinkConfig.pad_position must be 'first' or 'last', got {self.pad_position!r}")
        if isinstance(self.pad_value, bool) or not isinstance(self.pad_value, (int, np.integer)) \
                or not 0 <= self.pad_value < 1024:
            raise ValueError(f"LinkConfig.pad_value must be a 10-bit int (0..1023), got {self.pad_value!r}")
        if not isinstance(self.precoding, (bool, np.bool_)):
            raise ValueError(f"LinkConfig.precoding must be a bool, got {self.precoding!r}")
        if self.precoder_init not in (0, 1, 2, 3):
            raise ValueError(f"LinkConfig.precoder_init must be 0..3, got {self.precoder_init!r}")
        n_pcsl = pcs_lanes(self.rate)
        if self.n_lanes is None:
            object.__setattr__(self, "n_lanes", PHYSICAL_LANES[self.rate])
        if not isinstance(self.n_lanes, (int, np.integer)) or self.n_lanes <= 0 or n_pcsl % self.n_lanes:
            raise ValueError(f"LinkConfig.n_lanes must divide the {n_pcsl} PCS lanes of {self.rate}, got {self.n_lanes!r}")
        if self.lane_order is not None:
            object.__setattr__(self, "lane_order", tuple(tuple(int(x) for x in g) for g in self.lane_order))
        try:
            BitMux(n_pcsl, int(self.n_lanes), self.lane_order)
        except ValueError as exc:
            raise ValueError(f"LinkConfig.lane_order: {exc}") from None
        if self.level is None:
            codeword = self.code in _CODEWORD_ONLY or (self.code == "rs272" and self.pad_position == "first")
            object.__setattr__(self, "level", "codeword" if codeword else "pcs")
        if self.level not in ("pcs", "codeword"):
            raise ValueError(f"LinkConfig.level must be 'pcs' or 'codeword', got {self.level!r}")
        if self.code in _CODEWORD_ONLY and self.level != "codeword":
            raise ValueError(f"LinkConfig: code={self.code!r} is not a Clause 119 code; it runs at level='codeword' only")
        if self.payload not in ("data", "frames"):
            raise ValueError(f"LinkConfig.payload must be 'data' or 'frames', got {self.payload!r}")
        if not isinstance(self.frame_bytes, (int, np.integer)) or not 14 <= self.frame_bytes <= 16000:
            raise ValueError(f"LinkConfig.frame_bytes must be an int in 14..16000, got {self.frame_bytes!r}")
        if self.error_marking not in ("pair", "none"):
            raise ValueError(f"LinkConfig.error_marking must be 'pair' or 'none', got {self.error_marking!r}")
        if self.level == "pcs":
            self.pcs_config  # validates am_spacing

    @property
    def n_pcs_lanes(self) -> int:
        return pcs_lanes(self.rate)

    @property
    def rs(self) -> RSCode:
        """The :class:`phy802.fec.RSCode` whose layout the line carries (KP4's for ``none``)."""
        return code_of(self.code)

    @property
    def label(self) -> str:
        """``"code/fec"`` (``"none"`` alone: without a code the mode changes nothing at the PHY)."""
        return "none" if self.code == "none" else f"{self.code}/{self.fec}"

    @property
    def decoder(self) -> str | None:
        """``"correct"``, ``"detect"`` or ``None`` (no decoding; always for ``code="none"``)."""
        return None if self.code == "none" else _DECODER[self.fec]

    @property
    def indicate(self) -> bool:
        """True when flagged codewords are marked towards the PCS (119.2.5.3 error indication)."""
        return self.decoder is not None and _INDICATE[self.fec]

    @property
    def data_slice(self) -> tuple[int, int]:
        """``(first, end)`` message positions that carry payload: all k for KP4/KR4, the 257
        non-pad symbols for ``rs272``."""
        r = self.rs
        if self.code != "rs272":
            return 0, r.k
        return (0, r.k - 1) if self.pad_position == "last" else (1, r.k)

    @property
    def data_symbols(self) -> int:
        """Payload symbols per codeword (514, or 257 for ``rs272``)."""
        a, b = self.data_slice
        return b - a

    @property
    def pad_index(self) -> int | None:
        """Message position of the ``rs272`` pad symbol (``None`` for other codes)."""
        if self.code != "rs272":
            return None
        return self.rs.k - 1 if self.pad_position == "last" else 0

    @property
    def mux(self) -> BitMux:
        return BitMux(self.n_pcs_lanes, int(self.n_lanes), self.lane_order)

    @property
    def pcs_config(self) -> PcsConfig:
        mode = {"correct": "correct", "detect": "detect", None: "bypass"}[self.decoder]
        marking = self.error_marking if self.indicate else "none"
        return PcsConfig(rate=self.rate, fec="rs272" if self.code == "rs272" else "kp4", decode_mode=mode,
                         am_spacing=self.am_spacing, error_marking=marking, am_lock_tolerance=self.am_lock_tolerance,
                         pad_position=self.pad_position, pad_value=int(self.pad_value))


# ------------------------------------------------------------------------------------- geometry
