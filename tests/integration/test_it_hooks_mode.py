"""``replay_via="hooks"``: the model on a stock gloo group, the link errors through torch's
seams (DDP's ``register_comm_hook``, FSDP2's custom all-gather / reduce-scatter, a pipeline stage's
received activations and activation gradients: ``integration.pp_hooks.ReplayStage``)."""

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


@pytest.fixture(scope="module", params=["ddp", "fsdp", "pp-gpipe", "pp-1f1b"])
def runs(request, tmp_path_factory):
    par, _, sched = request.param.partition("-")
    base = TrainConfig(parallel=par, world_size=2, schedule=sched or "gpipe", dump_logs=par == "pp", **TINY)
    if request.param == "fsdp":
        base = dataclasses.replace(base, replay=ReplayConfig(classes=("gradients", "params")))
        noisy = dataclasses.replace(NOISY, classes=("gradients", "params"))
    else:
        noisy = NOISY
    cfgs = [dataclasses.replace(base, wrapper=False), dataclasses.replace(base, replay_via="hooks"),
            dataclasses.replace(base, replay=noisy), dataclasses.replace(base, replay=noisy, replay_via="hooks")]
    return request.param, run_many(cfgs, timeout_s=300, out_dir=str(tmp_path_factory.mktemp("hooks")))


@pytest.mark.slow  # four 2-rank runs per parallelism, ~35-80 s each set
def test_hooks_mode_at_ber0_is_bit_identical_to_plain_training(runs):
    par, (plain, hooks, _, _) = runs
    assert _same(plain, hooks)
    bits = hooks["metrics"]["payload_bits"]
    # the traffic did cross the phy802 group
    wanted = {"ddp": ("gradients",), "fsdp": ("gradients", "params")}.get(par, ("activations", "activation_grads"))
    assert all(bits[c] > 0 for c in wanted), bits


@pytest.mark.slow
def test_hooks_mode_replays_link_errors_on_the_same_gradient_traffic(runs):
    """At BER > 0 both modes put the same corrupted traffic (payload bits per class) through the
    replay, and flips land in it. The same flips for the same seed hold where the phy802 group
    sees the same sequence of messages: FSDP2 (fully_shard sends nothing at set-up), whose runs
    are bit-identical. They do not hold for DDP: in group mode DDP's construction (its shape
    all-gather and parameter broadcast) crosses the phy802 group and advances each link's error
    stream; in hooks mode it stays on the stock group, so the same seed's flips fall elsewhere."""
    par, (_, _, group_mode, hooks_mode) = runs
    if par.startswith("pp"):
        pytest.skip("pipelines: test_pipeline_hooks_replay_each_link_s_messages_in_the_group_path_s_order")
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


def _link_messages(run) -> dict:
    """Per link ``(src, dst)``: the messages its receiver logged, ``(op, class, payload bits)`` in order
    (the stream bits each took depend on its resends, i.e. on where the flips fell)."""
    import json

    links: dict = {}
    for rank in (0, 1):
        with open(f"{run['out_dir']}/log_rank{rank}.json", encoding="utf-8") as fh:
            for _seq, op, cls, src, dst, _hop, pay, _stream, _n in json.load(fh)["messages"]:
                links.setdefault((src, dst), []).append((op, cls, pay))
    return links


@pytest.mark.slow
def test_pipeline_hooks_replay_each_link_s_messages_in_the_group_path_s_order(runs):
    """Pipelines: on each link the hooks path reserves the same messages (class, size) in the same
    order as the group path, on the same per-link cursor. The group path has more:
    the stage's set-up (its warm-up vote and shape metadata, control messages) crosses the phy802
    group there and the stock group here, so each link's data starts further along its error stream
    and the same seed's flips fall elsewhere; what follows the set-up is message for message equal."""
    par, (_, _, group_mode, hooks_mode) = runs
    if not par.startswith("pp"):
        pytest.skip("pipelines only")
    g, h = _link_messages(group_mode), _link_messages(hooks_mode)
    assert set(g) == set(h) == {(0, 1), (1, 0)}
    for link in g:
        setup = len(g[link]) - len(h[link])
        assert setup > 0 and all(m[1] == "control" for m in g[link][:setup]), link
        assert g[link][setup:] == h[link], link
    gm, hm = group_mode["metrics"], hooks_mode["metrics"]
    for c in ("activations", "activation_grads"):
        assert hm["payload_bits"][c] == gm["payload_bits"][c] > 0 and hm["errors_injected"][c] > 0, c
    assert set(hm["errors_injected"]) == {"activations", "activation_grads"}


@pytest.mark.slow  # one 2-stage run that fails at its first activation message: ~30 s
def test_pipeline_hooks_a_lost_message_fails_both_stages_without_a_hang(tmp_path):
    """A lost activation message (IEEE mode at payload-stream BER 1e-2: every frame hit) fails the
    run on both stages with the link failure, exit 1 (not the group timeout, not a crash)."""
    import json

    from phy802.cli import main

    out = tmp_path / "out"
    rc = main(["train", "--parallel", "pp", "--replay-via", "hooks", "--schedule", "1f1b", "--world-size", "2",
               "--fec", "ieee", "--source", "independent", "--ber", "1e-2", "--steps", "2", "--seed", "1",
               "--corpus", "stdlib", "--n-layer", "2", "--n-embd", "16", "--n-head", "2", "--block-size", "16",
               "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--val-tokens", "64",
               "--timeout", "120", "--out", str(out), "--json"])
    with open(out / "result.json", encoding="utf-8") as fh:
        res = json.load(fh)
    assert rc == 1 and res["failed"] is True and res["failed_step"] == 0 and res["frames_lost"] >= 1
    assert "recv" in res["failure"] or "send" in res["failure"]


@pytest.mark.slow  # 2 spawned ranks, 6 one-step pipelines: 17 s of CPU, 59 s wall on the shared 2-vCPU machine
def test_replay_stage_is_bit_identical_at_ber0_and_flips_received_tensors_at_a_ber():
    """ReplayStage itself, GPipe and 1F1B on 2 spawned ranks: at BER 0 each stage's gradients are
    bit-identical to a plain PipelineStage's over the same gloo group; at BER 1e-3 the received
    activations (stage 1) and activation gradients (stage 0) carry flips and the gradients change;
    a replay group that is not a phy802 group is refused naming it."""
    from _it_helpers import load_ranks, spawn
    from _it_wrapper_workers import pipeline_hooks_worker

    ranks = load_ranks(spawn(pipeline_hooks_worker, 2, timeout_s=120), 2)
    for rank, got in enumerate(ranks):
        assert "crash" not in got, got.get("crash")
        cls = "activations" if rank == 1 else "activation_grads"  # what each stage receives
        for sched in ("gpipe", "1f1b"):
            plain, ber0, noisy = (got[f"{sched}/{v}"] for v in ("plain", "ber0", "noisy"))
            assert ber0["grads"] == plain["grads"] and ber0["bits"][cls] == 4 * 2 * 64 * 32  # 4 microbatches
            assert ber0["flips"] == {} and set(noisy["flips"]) == {cls} and noisy["flips"][cls] > 0
            assert noisy["grads"] != plain["grads"]
        assert "replay_group must be a phy802 group" in got["refused"]


@pytest.mark.slow  # 4 spawned ranks per schedule: ~70 s wall each on the shared 2-vCPU machine
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_hooks_a_lost_message_fails_every_stage_well_before_the_group_timeout(schedule):
    """4 ReplayStages on a stock gloo group (timeout 20 s); activation 0 -> 1 is lost. Stages 0 and 1
    fail by the loss itself; stages 2 and 3 take no part in the failed link and waited in the
    schedule's gloo receive (a plain ``Work.wait()``) for a message stage 1 never sent, until the
    20 s group timeout, then failed with gloo's timeout instead of the link failure. Now each stage
    waits on its receives polling the phy802 group's store, and raises LinkFailure naming the loss."""
    from _it_helpers import load_ranks, spawn
    from _it_wrapper_workers import pipeline_hooks_loss_worker

    ranks = load_ranks(spawn(pipeline_hooks_loss_worker, 4, schedule, timeout_s=120), 4)
    first = min(r["failed_at"] for r in ranks if "failed_at" in r)
    for rank, r in enumerate(ranks):
        assert "crash" not in r, r.get("crash")
        assert r["type"] == "LinkFailure", (rank, r)
        # the group timeout is 20 s; each stage fails within the store poll (50 ms) of the first failure
        # (the first failure itself may take seconds on a loaded machine: first delivery, Numba load)
        assert r["failed_at"] - first < 20.0 / 3 and r["seconds"] < 15.0, (rank, r)
    assert ranks[1]["frames_lost"] > 0 and "on link 0 -> 1" in ranks[1]["raised"], ranks[1]
    for r in ranks[2:]:  # stopped by the store: the cause named
        assert r["frames_lost"] == 0 and "a link of the group failed" in r["raised"], r
        assert "lost" in r["raised"] and "link 0 -> 1" in r["raised"], r


@pytest.mark.slow  # one 3-stage run that fails at its first activation message: ~30 s
def test_pipeline_hooks_training_run_with_a_lost_frame_fails_every_rank_promptly():
    """``phy802 train --parallel pp --replay-via hooks`` over 3 stages (group timeout 150 s) at payload-stream
    BER 1e-2 (IEEE mode: the first activation 0 -> 1 is lost). Stage 2 waited in the schedule's gloo
    receive for the group timeout; its pending receive then also made the process end in SIGABRT once
    the run stopped (gloo cannot cancel it). Now every rank stops within a store poll and the run
    reports the link failure."""
    import time

    from integration.train import build_config, run_training

    timeout = 150.0
    cfg = build_config(parallel="pp", replay_via="hooks", schedule="gpipe", world_size=3, ber=1e-2, fec="ieee",
                       source="independent", steps=2, n_layer=3, n_embd=16, n_head=2, block_size=16, batch_size=4,
                       eval_interval=2, eval_iters=1, val_tokens=64, comm_timeout_s=timeout, corpus="stdlib", seed=1)
    t0 = time.monotonic()
    r = run_training(cfg, timeout_s=2 * timeout)
    assert time.monotonic() - t0 < timeout / 3  # spawning the 3 ranks included
    assert r["failed"] is True and r["failed_step"] == 0 and r["frames_lost"] >= 1, r.get("failure")
    assert "link 0 -> 1" in r["failure"] and "NCCL_IB_RETRY_CNT=7" in r["failure"], r["failure"]
