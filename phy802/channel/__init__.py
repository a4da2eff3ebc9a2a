"""Channel models on PAM4 symbols of one physical lane, and per-lane composition.
Owns AWGN (error events and waveform), DFE bursts, Gilbert-Elliott and lane faults.

See :mod:`phy802.channel.base` for the dense/sparse conventions.
"""

from phy802.channel.awgn import IidSymbolErrors, Pam4Awgn
from phy802.channel.base import Channel, SymbolErrors, apply_symbol_errors, signs_to_values
from phy802.channel.burst import BurstEvents, DfeBurst, GilbertElliott, run_lengths
from phy802.channel.fault import DeadLane, LaneChannels, Noiseless, lane_fault
from phy802.channel.spec import channel_spec, parse_channel, with_ber

__all__ = [
    "Channel",
    "SymbolErrors",
    "apply_symbol_errors",
    "signs_to_values",
    "Pam4Awgn",
    "IidSymbolErrors",
    "BurstEvents",
    "DfeBurst",
    "GilbertElliott",
    "run_lengths",
    "Noiseless",
    "DeadLane",
    "LaneChannels",
    "lane_fault",
    "parse_channel",
    "channel_spec",
    "with_ber",
]
