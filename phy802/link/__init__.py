"""The composed link: PCS -> RS-FEC -> PMA -> channel per physical lane -> back (bit-exact), and a
codeword-level fast simulator that only follows the error pattern.

Three simulators share one geometry (which line bit carries which codeword bit) and one counter
set (:class:`LinkCounters`, mergeable, like a PHY's registers plus ground truth):

* :class:`Link` with ``level="pcs"``: the full Clause 119 chain on real payload (random 64b data
  blocks or Ethernet frames): 256b/257b, scrambler, AMs, 119.2.4.5 distribution, RS(544,514)
  encode, 119.2.4.7 interleave onto PCS lanes (:mod:`phy802.pcs`), bit-mux onto 8 or 4 physical
  lanes, PAM4 Gray map and optional 1/(1+D) precoder (:mod:`phy802.pma`), one channel per lane,
  and the receiver back to frames (lane lock, decode/detect/bypass, error marking, FCS).
* :class:`Link` with ``level="codeword"``: the same geometry on random message symbols (what the
  scrambled data looks like) with real RS encode and decode of every codeword, no 257b/scrambler/AM.
  **KR4 is not a Clause 119 code**: ``code="kr4"`` always runs at this level, on a hypothetical
  Clause 119 layout with RS(528,514): the same codeword pairs (514-symbol messages A/B), 14 parity
  symbols, and the 119.2.4.7 interleave rule generalised to n = 528 (66 symbols per PCS lane and
  pair at 400G, 132 at 200G) -- a documented model choice, not a standard format.
* :class:`FastLink`: no data at all.  By linearity the decoder's behaviour depends only on the
  error pattern, so it samples line symbol errors per lane (data-free samplers of the channel
  models; sent levels of scrambled data are i.i.d. uniform), maps them through the receive
  precoder, Gray demap, bit-mux and lane interleave to RS symbol errors per codeword, and decodes
  only the words with more than t errors (syndromes of the error pattern alone); a bounded-distance
  decoder always corrects <= t.  Used by :mod:`phy802.sweep` at low BER.

Code and receive mode (``LinkConfig(code=..., fec=...)``):

==========  ======================================================================================
``kp4``     RS(544,514), t = 15 (Cl.119)
``kr4``     RS(528,514), t = 7, codeword level only (see above)
``rs272``   RS(272,257+1), t = 7, the Ethernet Consortium low-latency code: ten 257b blocks + one
            pad symbol per codeword (``pad_position``/``pad_value``), at the ``pcs`` level through
            :class:`phy802.pcs.PcsConfig` ``fec="rs272"`` (the 119.2.4.7 rule generalised to
            n = 272: 34 symbols per PCS lane and pair at 400G) or at the ``codeword`` level
``none``    no FEC sublayer.  Clause 119 has no FEC-less format, so the line keeps the 544-symbol
            layout (parity as filler) and the receiver does not decode whatever ``fec`` says:
            statistically identical to ``kp4`` + ``bypass`` on the message bits
==========  ======================================================================================

=========================  ===========================================================================
``ieee``                   correct up to t and mark uncorrectable pairs (Cl.119 default)
``correct_no_indication``  correct, never mark (91.5.3.3 bypass indication): same decoder counters,
                           nothing marked at the ``pcs`` level
``detect_only``            syndrome check only ("bypass correction", 91.5.3.3): errored words flagged
                           and marked, data passed uncorrected
``bypass``                 parity sent but never read: no decode, nothing marked
``unequal``                as ``bypass`` on the line (the sign/exponent protection is a layer above,
                           :mod:`protocol.delivery`)
``llr``                    as ``ieee`` at the PHY, plus ``LinkCounters.llr_retries``: what link-level
                           retry resends (frames not delivered with the ``frames`` payload at the
                           ``pcs`` level; otherwise codeword pairs holding a flagged codeword) [I]
=========================  ===========================================================================

Old single-``fec`` spellings map as ``kp4`` = (kp4, ieee), ``kr4`` = (kr4, ieee), ``detect`` =
(kp4, detect_only), ``none`` = (none, any); they raise ValueError naming the new spelling.

Rates and counters: "pre-FEC" counts every RS bit/symbol of every codeword (= every line bit;
after the receive precoder, so one precoded line error gives two data symbol errors), "post-FEC"
counts the message (payload) symbols -- k, or the 257 non-pad symbols of ``rs272`` -- at the decoder output (before the descrambler; the payload error
pattern of the ``pcs`` level is after it, where each bit error becomes ~3 (1 + x^39 + x^58)).
A codeword error is a word whose delivered message differs from the sent one.
"""

from __future__ import annotations

from phy802.link.config import CODE_NAMES, FEC_MODES, K_MSG, OLD_FEC_SPELLINGS, LinkConfig, code_of, old_spelling_message
from phy802.link.geometry import LinkGeometry, geometry
from phy802.link.counters import LinkCounters, LinkResult
from phy802.link.bitexact import Link
from phy802.link.fast import FastLink

__all__ = [
    "FEC_MODES",
    "CODE_NAMES",
    "OLD_FEC_SPELLINGS",
    "old_spelling_message",
    "LinkConfig",
    "LinkGeometry",
    "LinkCounters",
    "LinkResult",
    "Link",
    "FastLink",
    "geometry",
    "code_of",
    "K_MSG",
]
