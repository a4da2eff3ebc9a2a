"""``replay_via="hooks"``: the model on a stock gloo group, the link errors through torch's
comm-hook seams (DDP's ``register_comm_hook``, FSDP2's custom all-gather / reduce-scatter)."""

import dataclasses

import pytest
import torch

from integration.replay import ReplayConfig
from integration.sources import SourceConfig
from integration.train import TrainConfig, run_many

TINY = dict(steps=3, corpus="stdlib", n_layer=2, n_embd=32, n_head=2, block_size=16, batch_size=4,
            eval_interval=100, eval_iters=1, val_tokens=64, comm_timeout_s=60.0)
NOISY = ReplayConfig(source=SourceConfig(ber=3e-4, seed=3, kind="independent"), guard="nan_to_zero_clamp")


def _params(r):
    return torch.load(f"{r['out_dir']}/params.pt")


def _same(a, b):
    return torch.equal(_params(a), _params(b)) and a["train_loss"] == b["train_loss"]


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def runs(request, tmp_path_factory):
    base = TrainConfig(parallel=request.param, world_size=2, **TINY)
    if request.param == "fsdp":
        base = dataclasses.replace(base, replay=ReplayConfig(classes=("gradients", "params")))
        noisy = dataclasses.replace(NOISY, classes=("gradients", "params"))
    else:
        noisy = NOISY
    cfgs = [dataclasses.replace(base, wrapper=False), dataclasses.replace(base, replay_via="hooks"),
            dataclasses.replace(base, replay=noisy), dataclasses.replace(base, replay=noisy, replay_via="hooks")]
    return request.param, run_many(cfgs, timeout_s=300, out_dir=str(tmp_path_factory.mktemp("hooks")))


@pytest.mark.slow  # four 2-rank runs per parallelism, ~35 s each set
def test_hooks_mode_at_ber0_is_bit_identical_to_plain_training(runs):
    par, (plain, hooks, _, _) = runs
    assert _same(plain, hooks)
    bits = hooks["metrics"]["payload_bits"]
    assert bits["gradients"] > 0 and (par == "ddp" or bits["params"] > 0)  # the traffic did cross the phy802 group


@pytest.mark.slow
def test_hooks_mode_replays_link_errors_on_the_same_gradient_traffic(runs):
    """At BER > 0 both modes put the same corrupted traffic (payload bits per class) through the
    replay, and flips land in it. The same flips for the same seed hold where the phy802 group
    sees the same sequence of messages: FSDP2 (fully_shard sends nothing at set-up), whose runs
    are bit-identical. They do not hold for DDP: in group mode DDP's construction (its shape
    all-gather and parameter broadcast) crosses the phy802 group and advances each link's error
    stream; in hooks mode it stays on the stock group, so the same seed's flips fall elsewhere."""
    par, (_, _, group_mode, hooks_mode) = runs
    g, h = group_mode["metrics"], hooks_mode["metrics"]
    classes = ("gradients",) if par == "ddp" else ("gradients", "params")
    for c in classes:
        assert h["payload_bits"][c] == g["payload_bits"][c] > 0, c
        assert h["errors_injected"].get(c, 0) > 0, c
    assert set(h["errors_injected"]) <= set(classes)
    if par == "fsdp":
        assert h["errors_injected"] == g["errors_injected"] and _same(group_mode, hooks_mode)
    else:
        assert sum(g["messages"].values()) > sum(h["messages"].values())  # DDP's set-up traffic, group mode only
        assert not _same(group_mode, hooks_mode)


def test_hooks_mode_is_refused_for_pipelines(capsys):
    from phy802.cli import main

    with pytest.raises(ValueError, match=r"replay_via 'hooks' \(--replay-via hooks\) is built for ddp and fsdp"):
        TrainConfig(parallel="pp", world_size=2, replay_via="hooks", **TINY)
    assert main(["train", "--parallel", "pp", "--replay-via", "hooks", "--steps", "1", "--corpus", "stdlib"]) == 2
    err = capsys.readouterr().err
    assert "replay_via 'hooks'" in err and "Traceback" not in err
