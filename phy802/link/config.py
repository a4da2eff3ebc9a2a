"""Link configuration: FEC modes, rates, lanes, precoding, mux order (see :mod:`phy802.link`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from phy802.fec import KP4, KR4, RSCode
from phy802.pcs import (
    PcsConfig,
)
from phy802.pma import BitMux


FecMode = Literal["kp4", "kr4", "detect", "bypass", "none"]
FEC_MODES: tuple[str, ...] = ("kp4", "kr4", "detect", "bypass", "none")
_DECODER = {"kp4": "correct", "kr4": "correct", "detect": "detect", "bypass": None, "none": None}
_POP10 = np.array([bin(i).count("1") for i in range(1024)], dtype=np.int64)
K_MSG = 514


def code_of(fec: str) -> RSCode:
    """The RS code whose layout the line carries in mode ``fec`` (KR4 for ``kr4``, else KP4)."""
    if fec not in FEC_MODES:
        raise ValueError(f"fec must be one of {', '.join(FEC_MODES)}, got {fec!r}")
    return KR4 if fec == "kr4" else KP4


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Structure of a composed link (swept physics lives in the channels, not here).

    Parameters
    ----------
    rate : ``"400G"`` (16 PCS lanes) or ``"200G"`` (8 PCS lanes).
    fec : ``"kp4"``, ``"kr4"``, ``"detect"``, ``"bypass"`` or ``"none"`` (module docstring).
    precoding : 1/(1+D) mod 4 precoder on every physical lane (120.5.7.2), default off.
    precoder_init : initial precoder state ``P(-1)`` on TX and RX (0..3; [?] in the notes, default 0).
    n_lanes : physical lanes (default 8 for 400G, 4 for 200G); PCS lanes are bit-muxed onto them.
    lane_order : ``lane_order[i]`` = PCS lanes interleaved on physical lane ``i`` (see
        :class:`phy802.pma.BitMux`; default consecutive groups, [?] implementation specific).
    level : ``"pcs"`` (full Clause 119) or ``"codeword"``; default ``"pcs"``, except ``kr4``.
    payload : ``"data"`` (random 64b data blocks, fastest) or ``"frames"`` (random Ethernet frames
        of ``frame_bytes`` octets + FCS, so FCS errors and frame counts are meaningful).
    frame_bytes : MAC frame length without FCS (default 1514).
    am_spacing : AM group spacing in 257b blocks (``None`` = the standard's; see PcsConfig).
    error_marking : receiver marking of pairs with an uncorrectable codeword (``"pair"``/``"none"``).
    am_lock_tolerance : marker symbols allowed in error at lane lock (0..5, default 5: each batch
        has a single AM group, and a lock failure raises :class:`phy802.pcs.LockError`).
    """

    rate: Literal["400G", "200G"] = "400G"
    fec: FecMode = "kp4"
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

    def __post_init__(self) -> None:
        if self.rate not in ("400G", "200G"):
            raise ValueError(f"LinkConfig.rate must be '400G' or '200G', got {self.rate!r}")
        if self.fec not in FEC_MODES:
            raise ValueError(f"LinkConfig.fec must be one of {', '.join(FEC_MODES)}, got {self.fec!r}")
        if not isinstance(self.precoding, (bool, np.bool_)):
            raise ValueError(f"LinkConfig.precoding must be a bool, got {self.precoding!r}")
        if self.precoder_init not in (0, 1, 2, 3):
            raise ValueError(f"LinkConfig.precoder_init must be 0..3, got {self.precoder_init!r}")
        n_pcsl = 16 if self.rate == "400G" else 8
        if self.n_lanes is None:
            object.__setattr__(self, "n_lanes", 8 if self.rate == "400G" else 4)
        if not isinstance(self.n_lanes, (int, np.integer)) or self.n_lanes <= 0 or n_pcsl % self.n_lanes:
            raise ValueError(f"LinkConfig.n_lanes must divide the {n_pcsl} PCS lanes of {self.rate}, got {self.n_lanes!r}")
        if self.lane_order is not None:
            object.__setattr__(self, "lane_order", tuple(tuple(int(x) for x in g) for g in self.lane_order))
        try:
            BitMux(n_pcsl, int(self.n_lanes), self.lane_order)
        except ValueError as exc:
            raise ValueError(f"LinkConfig.lane_order: {exc}") from None
        if self.level is None:
            object.__setattr__(self, "level", "codeword" if self.fec == "kr4" else "pcs")
        if self.level not in ("pcs", "codeword"):
            raise ValueError(f"LinkConfig.level must be 'pcs' or 'codeword', got {self.level!r}")
        if self.fec == "kr4" and self.level != "codeword":
            raise ValueError("LinkConfig: fec='kr4' is not a Clause 119 mode; it runs at level='codeword' only")
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
        return 16 if self.rate == "400G" else 8

    @property
    def code(self) -> RSCode:
        return code_of(self.fec)

    @property
    def decoder(self) -> str | None:
        """``"correct"``, ``"detect"`` or ``None`` (no decoding)."""
        return _DECODER[self.fec]

    @property
    def mux(self) -> BitMux:
        return BitMux(self.n_pcs_lanes, int(self.n_lanes), self.lane_order)

    @property
    def pcs_config(self) -> PcsConfig:
        mode = {"kp4": "correct", "detect": "detect", "bypass": "bypass", "none": "bypass"}.get(self.fec, "correct")
        return PcsConfig(rate=self.rate, decode_mode=mode, am_spacing=self.am_spacing,
                         error_marking=self.error_marking, am_lock_tolerance=self.am_lock_tolerance)


# ------------------------------------------------------------------------------------- geometry
