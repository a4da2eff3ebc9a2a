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
``llr``                    correct    yes       no         not in 802.3: link-level retry (below)
=========================  =========  ========  =========  ==========================================

``llr`` (link-level retry, as in Ultra Ethernet 1.0; tradeoff notes sec.2 [S]) decodes, corrects
and marks exactly like ``ieee``; the difference is who resends a frame that is still bad: the
link keeps a replay buffer and resends it after one link round trip (``retry="link"``), instead
of the end-to-end transport resend (go-back-N, ``retry="transport"``) of the other non-tolerant
modes.  The replayed copy is taken to arrive clean (its own failure probability is the frame loss
rate again, negligible at the BERs of interest) [I]; buffer size and timers are [?] in the notes.

The RS *code* is a separate choice (``phy802.fec.CODES``: ``kp4``, ``kr4``, ``rs272``, or
``none`` = no FEC sublayer); a mode names only what the receiver does with it.  Code names are
not modes: ``get_mode("kp4")`` raises and names the new spelling (code kp4 + mode ieee).
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
    "RATE_NAMES",
    "INNER_CODE_RATES",
    "inner_code_for",
    "PathOption",
    "PATH_OPTIONS",
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
    description : one line for tables.
    retry : {"transport", "link"}
        Who resends a dropped frame: the end-to-end transport (RoCEv2 go-back-N, default) or the
        link's replay buffer (``llr``: one link round trip, see the module docstring).
    """

    name: str
    decoder: Decoder
    indicate: bool
    tolerant: bool
    protected: Literal["all", "sign_exponent", "none"] = "none"
    description: str = ""
    retry: Literal["transport", "link"] = "transport"

    def __post_init__(self) -> None:
        if self.decoder not in ("correct", "detect", "none"):
            raise ValueError(f"FecMode.decoder must be 'correct', 'detect' or 'none', got {self.decoder!r}")
        if self.protected not in ("all", "sign_exponent", "none"):
            raise ValueError(f"FecMode.protected must be 'all', 'sign_exponent' or 'none', got {self.protected!r}")
        if self.retry not in ("transport", "link"):
            raise ValueError(f"FecMode.retry must be 'transport' or 'link', got {self.retry!r}")
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
        FecMode("llr", "correct", True, False, "none",
                "correct + mark like ieee; a frame still bad is resent by link-level retry",
                retry="link"),
    )
}
MODE_NAMES: tuple[str, ...] = tuple(MODES)

# hyphenated spellings of the canonical names
_ALIASES = {
    "detect-only": "detect_only",
    "correct-no-indication": "correct_no_indication",
}
# old spellings (from before the code and the receive mode were separate options): each names its new spelling
_OLD = {
    "kp4": "code 'kp4' with mode 'ieee'",
    "rs544": "code 'kp4' with mode 'ieee'",
    "kr4": "code 'kr4' with mode 'ieee'",
    "rs272": "code 'rs272' with mode 'ieee'",
    "none": "code 'none' (no FEC sublayer), or mode 'bypass'",
    "detect": "mode 'detect_only'",
    "correct": "mode 'correct_no_indication'",
    "no_indication": "mode 'correct_no_indication'",
    "uep": "mode 'unequal'",
}


def get_mode(mode: str | FecMode) -> FecMode:
    """Return the :class:`FecMode` named ``mode`` (one of :data:`MODE_NAMES`; ``-`` may stand for
    ``_``).  An old spelling (``kp4``, ``detect``, ``none``, ...) raises ValueError naming the new."""
    if isinstance(mode, FecMode):
        return mode
    key = str(mode).strip().lower()
    if key in _OLD:
        raise ValueError(f"FEC mode {mode!r} is an old spelling: use {_OLD[key]} "
                         f"(modes: {', '.join(MODE_NAMES)})")
    key = _ALIASES.get(key, key)
    if key not in MODES:
        raise ValueError(f"unknown FEC mode {mode!r}; choose from {', '.join(MODE_NAMES)}")
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


# --- 800G / 1.6T: the inner FEC and where the outer code terminates ----------------

#: every rate the layer knows; 800G/1.6T are the 802.3dj 200G-per-lane rates (dj notes [C])
RATE_NAMES: tuple[str, ...] = ("400G", "200G", "800G", "1.6T")
#: the rates whose optical lanes carry the Clause 177 inner code
INNER_CODE_RATES: tuple[str, ...] = ("800G", "1.6T")


def inner_code_for(rate: str) -> str:
    """The inner code a rate's optical lanes carry: ``"c177"`` at 800G/1.6T, ``"none"`` at 400G/200G."""
    key = str(rate).strip().upper()
    if key not in RATE_NAMES:
        raise ValueError(f"unknown rate {rate!r}; choose from {', '.join(RATE_NAMES)}")
    return "c177" if key in INNER_CODE_RATES else "none"


@dataclass(frozen=True, slots=True)
class PathOption:
    """One way to run the FEC along a multi-hop 800G/1.6T path (the frontier's three options).

    ``inner``: ``"c177"`` or ``"none"`` (inner FEC bypassed); ``mode``: the outer receive mode (a
    :data:`MODES` name); ``outer``: ``"segmented"`` (every hop terminates KP4) or ``"end_to_end"``.
    """

    name: str
    inner: Literal["c177", "none"]
    mode: str
    outer: Literal["segmented", "end_to_end"]
    description: str = ""

    def __post_init__(self) -> None:
        if self.inner not in ("c177", "none"):
            raise ValueError(f"PathOption.inner must be 'c177' or 'none', got {self.inner!r}")
        if self.outer not in ("segmented", "end_to_end"):
            raise ValueError(f"PathOption.outer must be 'segmented' or 'end_to_end', got {self.outer!r}")
        get_mode(self.mode)


PATH_OPTIONS: dict[str, PathOption] = {
    p.name: p
    for p in (
        PathOption("segmented", "c177", "ieee", "segmented", "inner FEC per hop, KP4 terminated and re-encoded per hop"),
        PathOption("end_to_end", "c177", "ieee", "end_to_end", "inner FEC per hop, KP4 decoded once at the far end"),
        PathOption("bypass_inner", "none", "ieee", "segmented", "inner FEC bypassed, KP4 per hop"),
        PathOption("bypass_outer", "c177", "bypass", "end_to_end", "inner FEC only, KP4 parity never read"),
    )
}
