"""Ranks that share one GPU run over gloo, whose send/recv take no CUDA tensors: the wrapper's
point-to-point messages and ring hops then go through host copies (``_host_staged``). No GPU here,
so the staging is forced on CPU tensors: two ranks in one process (two threads, gloo on a shared
HashStore) must give the same bytes and the same flips with and without it."""

import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from integration.process_group import ReplayProcessGroup
from integration.replay import ReplayConfig
from integration.sources import SourceConfig

_CLASSES = ("gradients", "params", "activations", "activation_grads")


def _run_pair(mode: str, ber: float, staged: bool, monkeypatch) -> list[dict]:
    if staged:
        monkeypatch.setattr(ReplayProcessGroup, "_host_staged", lambda self, t, inner: True)
    store = dist.HashStore()
    cfg = ReplayConfig(source=SourceConfig(ber=ber, seed=3, kind="independent", fec="bypass"), mode=mode,
                       classes=_CLASSES)
    out: list[dict] = [{}, {}]
    errors: list[BaseException] = []

    def rank_body(r: int) -> None:
        try:
            to = timedelta(seconds=60)
            g = ReplayProcessGroup(dist.PrefixStore("wrap", store), r, 2, to, cfg,
                                   inner=dist.ProcessGroupGloo(dist.PrefixStore("inner", store), r, 2, to))
            gen = torch.Generator().manual_seed(10 + r)
            x = torch.randn(3000, generator=gen)
            a = x.clone()
            g.allreduce([a]).wait()
            if r == 0:
                g.send([x.clone()], 1, 5).wait()
                got = torch.empty(0)
            else:
                got = torch.empty(3000)
                g.recv([got], 0, 5).wait()
            out[r] = {"x": x, "allreduce": a, "recv": got, "flips": g.metrics.total("errors_injected"),
                      "log": [(e["seq"], e["element"], e["bit"]) for e in g.log.records()]}
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread below
            errors.append(exc)

    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    monkeypatch.undo()
    if errors:
        raise errors[0]
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


@pytest.mark.parametrize("mode", ["endpoint", "ring"])
def test_host_staged_hops_and_p2p_give_the_same_bytes_and_flips(mode, monkeypatch):
    clean = _run_pair(mode, 0.0, True, monkeypatch)
    ref = clean[0]["x"] + clean[1]["x"]  # 2 ranks: one addition, either order gives the same bits
    for r in clean:
        assert torch.equal(r["allreduce"], ref) and r["flips"] == 0
    assert torch.equal(clean[1]["recv"], clean[0]["x"])
    plain = _run_pair(mode, 3e-4, False, monkeypatch)
    staged = _run_pair(mode, 3e-4, True, monkeypatch)
    assert sum(r["flips"] for r in plain) > 10
    for p, s in zip(plain, staged):
        assert p["flips"] == s["flips"] and p["log"] == s["log"]
        for k in ("allreduce", "recv"):
            assert torch.equal(p[k].view(torch.int32), s[k].view(torch.int32)), k
