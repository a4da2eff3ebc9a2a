"""Ring-mode link bookkeeping at 16 and 24 ranks, one process per test, on torch's fake process group.

``FakeProcessGroup`` (torch's ``fake`` backend) completes every op at once without moving data, so
one process can play rank k of a large world: what is checked is the wrapper's bookkeeping -- which
link each hop uses, which chunk, how many bits -- against an independent oracle, and that the
sender-side shadow of a link (the sender knows a lost frame as its receiver does) walks
the same delivery as the receiver.
"""

from datetime import timedelta

import numpy as np
import pytest
import torch

from integration.process_group import ReplayProcessGroup, gloo_ring_chunks
from integration.replay import ReplayConfig
from integration.sources import SourceConfig


def _rank(k: int, n: int, ber: float, mode: str = "ring") -> ReplayProcessGroup:
    cfg = ReplayConfig(source=SourceConfig(ber=ber, seed=11, kind="independent"), mode=mode,
                       classes=("gradients", "params"))
    return ReplayProcessGroup.standalone(cfg, k, n, timeout=timedelta(seconds=5))


@pytest.mark.parametrize("n", [16, 24])
def test_ring_allreduce_hops_links_and_bits(n):
    k = 5
    g = _rank(k, n, 0.0)
    numel = 3 * (1 << 16) + 17  # uneven: the last chunks are short
    g.allreduce([torch.zeros(numel)]).wait()
    chunks = gloo_ring_chunks(numel, 4, n)
    msgs = sorted(g.log.messages)
    # 2 (n - 1) hops, all on link k+1 -> k, hop numbers 0 .. 2n - 3, chunk sizes from the ring schedule
    expect = []
    for s in range(n - 1):
        a, b = chunks[(k + 2 + s) % n]
        if b > a:
            expect.append((s, 32 * (b - a)))
    for s in range(n - 1):
        a, b = chunks[(k + 1 + s) % n]
        if b > a:
            expect.append((n - 1 + s, 32 * (b - a)))
    assert [(m[5], m[6]) for m in msgs] == expect
    assert {(m[3], m[4]) for m in msgs} == {((k + 1) % n, k)}
    total = sum(m[6] for m in msgs)
    # each directed link carries 2 (n - 1) / n of the buffer (within one chunk of rounding)
    assert abs(total - 2 * (n - 1) / n * 32 * numel) <= 2 * 32 * max(b - a for a, b in chunks)


def test_sender_shadow_walks_the_receivers_delivery_at_16_ranks():
    n, k = 16, 9
    recv_side, send_side = _rank(k, n, 2e-4), _rank((k + 1) % n, n, 2e-4)
    for numel in (1 << 15, 12345, 1 << 17):
        for g in (recv_side, send_side):
            g.allreduce([torch.randn(numel)]).wait()
    key = ((k + 1) % n, k)
    a, b = recv_side._links[key], send_side._links[key]
    assert a is not None and b is not None and a is not b
    assert a.cursor == b.cursor > 0  # same stream bits consumed: same frames, resends, fates
    assert recv_side.metrics.total("frames_resent") > 0


def test_endpoint_allgather_bookkeeping_at_16_ranks():
    n, k = 16, 3
    g = _rank(k, n, 0.0, mode="endpoint")
    out = [torch.zeros(1000) for _ in range(n)]
    g.allgather([out], [torch.zeros(1000)]).wait()
    links = sorted((m[3], m[4]) for m in g.log.messages)
    assert links == [(j, k) for j in range(n) if j != k]
    assert all(m[6] == 32_000 for m in g.log.messages)
    assert np.all(np.diff([m[0] for m in sorted(g.log.messages)]) == 1)


def test_standalone_group_plays_one_rank_and_refuses_a_rank_outside_the_world():
    g = ReplayProcessGroup.standalone(ReplayConfig(), 3, 16)
    assert (g.rank(), g.size()) == (3, 16)
    x = torch.ones(1000)
    g.allreduce([x]).wait()  # BER 0 (the default source): the fake group moves nothing, nothing flips
    assert torch.equal(x, torch.ones(1000))
    for bad in (-1, 16):
        with pytest.raises(ValueError, match=f"standalone rank must be in 0..15, got {bad}"):
            ReplayProcessGroup.standalone(ReplayConfig(), bad, 16)
