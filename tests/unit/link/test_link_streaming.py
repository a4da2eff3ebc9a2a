"""Link.run / FastLink.run draw their batch seeds one at a time (memory independent of n_pairs)."""

from __future__ import annotations

import numpy as np

from phy802.channel import Pam4Awgn
from phy802.link import FastLink, Link, LinkConfig


class _Recording(np.random.SeedSequence):
    """A SeedSequence that records how many children each ``spawn`` call asks for."""

    def spawn(self, n_children):
        if getattr(self, "calls", None) is not None:  # the master only (children are of this class too)
            self.calls.append(n_children)
        return super().spawn(n_children)


def _seed(n=7):
    ss = _Recording(n)
    ss.calls = []
    return ss


def _counts(ctr):
    d = ctr.as_dict()
    d.pop("seconds")
    return d


def test_link_run_streams_batch_seeds_and_matches_upfront_children():
    cfg = LinkConfig(code="kp4", fec="ieee")
    ch = Pam4Awgn.from_ber(3e-3)
    ss = _seed()
    res = Link(cfg, ch).run(10, ss, batch_pairs=3)
    assert ss.calls == [1, 1, 1, 1]  # never spawn(n_batches): no list growing with n_pairs
    # the same as the children spawn(n_batches) would give, batch by batch
    ref = Link(cfg, ch)
    ctr = ref._new_counters()
    off = 0
    for j, child in enumerate(np.random.SeedSequence(7).spawn(4)):
        _, used = ref.run_batch(min(3, 10 - 3 * j), child, ctr, off)
        off += used
    assert _counts(res.counters) == _counts(ctr)


def test_fast_link_run_streams_batch_seeds():
    ss = _seed()
    FastLink(LinkConfig(code="kp4", fec="ieee"), Pam4Awgn.from_ber(1e-3)).run(5000, ss, batch_pairs=1000)
    assert ss.calls == [1] * 5
