"""phy802: a bit-exact, fast emulator of the IEEE 802.3bs 400GBASE-R / 200GBASE-R PHY.
Owns the PHY (PCS, FEC, PMA, channel, link), its closed forms and sweeps, FEC telemetry and the CLI.

Subpackages follow the standard's blocks: :mod:`phy802.fec` (Clause 91/119 Reed-Solomon),
:mod:`phy802.pcs` (Clause 119 PCS), :mod:`phy802.pma` (Clause 120 PAM4 PMA),
:mod:`phy802.channel` (channel models), plus :mod:`phy802.theory` and :mod:`phy802.stats`.
This package never imports torch.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
