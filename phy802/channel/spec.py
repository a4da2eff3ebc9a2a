"""Channel models from short text specs (for configs and command lines) and re-targeting to a BER.

Spec grammar: ``NAME[:key=value,key=value,...]``::

    none                                 Noiseless
    awgn:snr_db=17.5 | awgn:ber=2.4e-4   Pam4Awgn (by SNR = Es/sigma^2 in dB, or by pre-FEC BER)
    dfe:pe=1e-4,pb=0.5[,alternate=0]     DfeBurst (or dfe:ber=2.4e-4,pb=0.5: SER = 2 * BER)
    ge:p_gb=1e-4,p_bg=0.1,e_g=0,e_b=0.5[,alternate=1]
    dead[:mode=random|stuck,value=0]     DeadLane

:func:`with_ber` returns the same kind of model re-targeted to a pre-FEC BER (AWGN: closed form
inverted; DFE: keeps ``pb``; GE: scales ``e_g`` and ``e_b`` by one factor), which is what a sweep
over pre-FEC BER needs. :func:`channel_spec` writes a spec back.
"""

from __future__ import annotations

import dataclasses

from phy802.channel.awgn import Pam4Awgn
from phy802.channel.burst import DfeBurst, GilbertElliott
from phy802.channel.fault import DeadLane, Noiseless

__all__ = ["parse_channel", "channel_spec", "with_ber"]

_FLOAT = {"snr_db", "ber", "pe", "pb", "p_gb", "p_bg", "e_g", "e_b", "ser"}
_BOOL = {"alternate"}
_INT = {"value"}
_ALLOWED = {
    "none": set(),
    "awgn": {"snr_db", "ber"},
    "dfe": {"pe", "pb", "ber", "ser", "alternate"},
    "ge": {"p_gb", "p_bg", "e_g", "e_b", "alternate"},
    "dead": {"mode", "value"},
}


def _parse_fields(spec: str, name: str, body: str) -> dict:
    out = {}
    for tok in filter(None, body.split(",")):
        key, sep, val = tok.partition("=")
        key = key.strip()
        if not sep or key not in _ALLOWED[name]:
            raise ValueError(f"channel spec {spec!r}: field {tok!r} (allowed for {name}: "
                             f"{', '.join(sorted(_ALLOWED[name])) or 'none'})")
        try:
            if key in _FLOAT:
                out[key] = float(val)
            elif key in _BOOL:
                if val not in ("0", "1", "true", "false"):
                    raise ValueError
                out[key] = val in ("1", "true")
            elif key in _INT:
                out[key] = int(val)
            else:
                out[key] = val
        except ValueError:
            raise ValueError(f"channel spec {spec!r}: field {key}={val!r} is not valid") from None
    return out


def parse_channel(spec: str):
    """Build a channel from a spec string (see module docstring); ``ValueError`` names the bad field."""
    name, _, body = str(spec).strip().partition(":")
    name = name.lower()
    if name not in _ALLOWED:
        raise ValueError(f"channel spec {spec!r}: unknown model {name!r} (choose from {', '.join(_ALLOWED)})")
    f = _parse_fields(spec, name, body)
    if name == "none":
        return Noiseless()
    if name == "awgn":
        if len(f) != 1:
            raise ValueError(f"channel spec {spec!r}: give exactly one of snr_db= or ber=")
        return Pam4Awgn.from_ber(f["ber"]) if "ber" in f else Pam4Awgn(f["snr_db"])
    if name == "dfe":
        if "pb" not in f:
            raise ValueError(f"channel spec {spec!r}: dfe needs pb=")
        alt = f.get("alternate", True)
        given = [k for k in ("pe", "ber", "ser") if k in f]
        if len(given) != 1:
            raise ValueError(f"channel spec {spec!r}: give exactly one of pe=, ser=, ber=")
        if "pe" in f:
            return DfeBurst(f["pe"], f["pb"], alt)
        ser = f["ser"] if "ser" in f else 2.0 * f["ber"]
        return DfeBurst.from_ser(ser, f["pb"], alternate=alt)
    if name == "ge":
        missing = {"p_gb", "p_bg", "e_g", "e_b"} - set(f)
        if missing:
            raise ValueError(f"channel spec {spec!r}: ge lacks {', '.join(sorted(missing))}")
        return GilbertElliott(f["p_gb"], f["p_bg"], f["e_g"], f["e_b"], f.get("alternate", False))
    return DeadLane(f.get("mode", "random"), f.get("value", 0))


def channel_spec(channel) -> str:
    """The spec string of a channel built by :func:`parse_channel` (round-trips)."""
    if isinstance(channel, Noiseless):
        return "none"
    if isinstance(channel, Pam4Awgn):
        return f"awgn:snr_db={channel.snr_db!r}"
    if isinstance(channel, DfeBurst):
        return f"dfe:pe={channel.pe!r},pb={channel.pb!r},alternate={int(channel.alternate)}"
    if isinstance(channel, GilbertElliott):
        return (f"ge:p_gb={channel.p_gb!r},p_bg={channel.p_bg!r},e_g={channel.e_g!r},e_b={channel.e_b!r},"
                f"alternate={int(channel.alternate)}")
    if isinstance(channel, DeadLane):
        return f"dead:mode={channel.mode},value={channel.value}"
    raise TypeError(f"no spec for {type(channel).__name__}")


def with_ber(channel, ber: float):
    """The same model re-targeted to pre-FEC (Gray) BER ``ber``; burst shape parameters are kept."""
    if not 0.0 < ber < 0.5:
        raise ValueError(f"ber must be in (0, 0.5), got {ber}")
    if isinstance(channel, Pam4Awgn):
        return Pam4Awgn.from_ber(ber)
    if isinstance(channel, DfeBurst):
        return DfeBurst.from_ser(2.0 * ber, channel.pb, alternate=channel.alternate, start=channel.start)
    if isinstance(channel, GilbertElliott):
        if channel.ber <= 0:
            raise ValueError("cannot re-target a Gilbert-Elliott channel with zero error probabilities")
        k = ber / channel.ber
        if channel.e_b * k > 1 or channel.e_g * k > 1:
            raise ValueError(f"BER {ber} needs error probabilities above 1 for {channel}")
        return dataclasses.replace(channel, e_g=channel.e_g * k, e_b=channel.e_b * k)
    raise ValueError(f"{type(channel).__name__} has no BER parameter")
