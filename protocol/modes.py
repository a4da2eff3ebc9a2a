"""FEC and delivery modes of the bypass-FEC layer, selectable per traffic class.

A mode says what the receive-side RS decoder does (correct, detect, nothing), whether it marks
the 66b blocks of codewords it could not correct (the 119.2.5.3 / 91.5.3.3 error indication),
and whether the MAC delivers a frame whose payload failed its FCS/ICRC ("error-tolerant"
delivery, this layer's delta from 802.3; see ``protocol/SPEC.md``).

=========================  =========  ========  =========  ==========================================
mode                       decoder    indicate  tolerant   802.3 equivalent
=========================  =========  ========  =========  ==========================================
``ieee``                   correct    yes       no         Cl.119 default (correct + indicate)
``correct_no_indication``  correct    no        yes        91.5.3.3 bypass indication (Cl.91 option)
``detect_only``            detect     yes       no         91.5.3.3 bypass correction (Cl.91 option)
``bypass``                 none       no        yes        not in 802.3 (this layer)
``unequal``                none       no        yes        not in 802.3: sign/exponent protected
=========================  =========  ========  =========  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FecMode",
    "MODES",
    "MODE_NAMES",
    "get_mode",
    "TrafficClass",
    "TRAFFIC_CLASSES",
    "ClassPolicy",
    "FLOAT_FORMATS",
    "protected_bit_mask",
]

Decoder = Literal["correct", "detect", "none"]


@dataclass(frozen=True, slots=True)
class FecMode:
    """One receive-side FEC/delivery mode.

    Parameters
    ----------
    name : str
        Canonical name (a key of :data:`MODES`).
    decoder : {"correct", "detect", "none"}
        ``correct``: bounded-distance RS decoding (t = 15 for RS(544,514));
        ``detect``: syndrome check only, no correction (the Cl.91 bypass-correction option);
        ``none``: the RS parity is discarded unread.
    indicate : bool
        Codewords the decoder cannot correct (or, in ``detect``, any codeword with a nonzero
        syndrome) have all their 66b blocks turned into error blocks, so the MAC drops the frames.
    tolerant : bool
        The MAC delivers a frame whose *payload* failed FCS/ICRC (the header still has to pass its
        own check); a non-tolerant mode drops it and the transport retransmits.
    protected : {"all", "sign_exponent", "none"}
        Which payload bits are immune to line errors.  ``sign_exponent`` is the unequal-protection
        experiment: the sign and exponent bits of each float element travel under separate
        protection and are delivered error-free; mantissa bits take the raw line errors.
    """

    name: str
    decoder: Decoder
    indicate: bool
    tolerant: bool
    protected: Literal["all", "sign_exponent", "none"] = "none"
    description: str = ""

    def __post_init__(self) -> None:
        if self.decoder not in ("correct", "detect", "none"):
            raise ValueError(f"FecMode.decoder must be 'correct', 'detect' or 'none', got {self.decoder!r}")
        if self.protected not in ("all", "sign_exponent", "none"):
            raise ValueError(f"FecMode.protected must be 'all', 'sign_exponent' or 'none', got {self.protected!r}")
        if self.decoder == "none" and self.indicate:
            raise ValueError(f"FecMode {self.name!r}: a mode without decoder cannot indicate errors")

    @property
    def corrects(self) -> bool:
        """True when the RS decoder corrects (<= t symbol errors always fixed)."""
        return self.decoder == "correct"


MODES: dict[str, FecMode] = {
    m.name: m
    for m in (
        FecMode("ieee", "correct", True, False, "none",
                "802.3bs default: correct up to t=15 symbols, mark uncorrectable codewords"),
        FecMode("correct_no_indication", "correct", False, True, "none",
                "correct, never mark (Cl.91 bypass indication); residual errors delivered"),
        FecMode("detect_only", "detect", True, False, "none",
                "syndrome check only, mark errored codewords (Cl.91 bypass correction)"),
        FecMode("bypass", "none", False, True, "none",
                "no FEC decode; payload errors delivered, headers still checked"),
        FecMode("unequal", "none", False, True, "sign_exponent",
                "no FEC decode for mantissa bits; sign/exponent bits protected"),
    )
}
MODE_NAMES: tuple[str, ...] = tuple(MODES)

_ALIASES = {
    "kp4": "ieee",
    "rs544": "ieee",
    "correct": "correct_no_indication",
    "no_indication": "correct_no_indication",
    "detect": "detect_only",
    "detect-only": "detect_only",
    "correct-no-indication": "correct_no_indication",
    "none": "bypass",
    "uep": "unequal",
}


def get_mode(mode: str | FecMode) -> FecMode:
    """Return the :class:`FecMode` named ``mode`` (aliases: kp4, detect, correct, none, uep)."""
    if isinstance(mode, FecMode):
        return mode
    key = str(mode).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in MODES:
        raise ValueError(
            f"unknown FEC mode {mode!r}; choose from {', '.join(MODE_NAMES)} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return MODES[key]


# --- traffic classes --------------------------------------------------------------------------

TrafficClass = Literal["gradients", "activations", "activation_gradients", "parameters", "control"]
TRAFFIC_CLASSES: tuple[str, ...] = ("gradients", "activations", "activation_gradients", "parameters", "control")


@dataclass(frozen=True, slots=True)
class ClassPolicy:
    """Which mode each traffic class uses.  ``control`` is always ``ieee`` (SPEC.md, delta D5)."""

    gradients: str = "ieee"
    activations: str = "ieee"
    activation_gradients: str = "ieee"
    parameters: str = "ieee"
    control: str = "ieee"

    def __post_init__(self) -> None:
        for cls in TRAFFIC_CLASSES:
            get_mode(getattr(self, cls))
        if get_mode(self.control).name != "ieee":
            raise ValueError(f"ClassPolicy.control must be 'ieee' (control traffic keeps full FEC), got {self.control!r}")

    def mode_of(self, traffic_class: str) -> FecMode:
        if traffic_class not in TRAFFIC_CLASSES:
            raise ValueError(f"unknown traffic class {traffic_class!r}; choose from {', '.join(TRAFFIC_CLASSES)}")
        return get_mode(getattr(self, traffic_class))

    @classmethod
    def uniform(cls, mode: str, *, except_control: bool = True) -> "ClassPolicy":
        """All tensor classes in ``mode``; control stays ``ieee``."""
        m = get_mode(mode).name
        return cls(m, m, m, m, "ieee" if except_control else m)


# --- unequal protection: which bits of a float element are protected -------------------------

# (element bits, sign+exponent bits). Elements are little-endian in the stream, each octet LSB
# first, so element bit j (0 = LSB of the mantissa) is stream bit 8*(byte) + (j % 8) with
# byte = j // 8 inside the element.
FLOAT_FORMATS: dict[str, tuple[int, int]] = {
    "float32": (32, 9),
    "bfloat16": (16, 9),
    "float16": (16, 6),
    "float64": (64, 12),
}


def protected_bit_mask(fmt: str):
    """Boolean mask over the bits of one element: True where the bit is sign or exponent.

    Index ``j`` of the mask is element bit ``j`` (LSB = 0), which is also the bit's offset from
    the element's first stream bit (little-endian octets, LSB first).
    """
    import numpy as np

    if fmt not in FLOAT_FORMATS:
        raise ValueError(f"unknown float format {fmt!r}; choose from {', '.join(FLOAT_FORMATS)}")
    width, top = FLOAT_FORMATS[fmt]
    mask = np.zeros(width, dtype=bool)
    mask[width - top:] = True
    return mask
