"""Failures reach the caller, non-contiguous tensors, guards, noise metric."""

import dataclasses
import json
import math
import os
import time
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

from integration.process_group import _DeferredWork, _ReplayWork
from integration.replay import Metrics, corrupt_received, guard_flipped
from _it_helpers import dead_peer_worker, load_ranks, noncontig_worker, spawn, spawn_tolerant


def test_work_over_a_failed_future_raises():
    fut = torch.futures.Future()
    chained = fut.then(lambda f: f.value())
    w = _ReplayWork(chained, 5.0, "allreduce")
    fut.set_exception(RuntimeError("peer gone"))
    with pytest.raises(RuntimeError, match="peer gone"):
        w.wait()
    with pytest.raises(RuntimeError, match="peer gone"):
        w.get_future().wait()
    assert w.is_completed() and not w.is_success() and w.exception() is not None


def test_work_wait_is_bounded_by_the_timeout():
    w = _ReplayWork(torch.futures.Future(), 0.2, "allreduce")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="0.2 s"):
        w.wait()
    from datetime import timedelta

    with pytest.raises(TimeoutError):
        w.wait(timedelta(seconds=0.05))
    assert time.monotonic() - t0 < 3


def test_deferred_work_raises_finish_failures_and_has_a_future():
    class Inner:
        def wait(self, timeout=None):
            return True

    def boom():
        raise ValueError("receive path failed")

    w = _DeferredWork(Inner(), boom, 5.0, ["t"], "recv")
    with pytest.raises(ValueError, match="receive path"):
        w.get_future().wait()
    with pytest.raises(ValueError, match="receive path"):
        w.wait()
    ok = _DeferredWork(Inner(), None, 5.0, ["t"], "recv")
    assert ok.get_future().wait() == ["t"] and ok.is_success()


@pytest.mark.parametrize("mode,ber", [("endpoint", 1e-4), ("endpoint", 0.0), ("ring", 1e-4)])
def test_dead_peer_makes_allreduce_raise(mode, ber):
    out = spawn_tolerant(dead_peer_worker, 2, mode, ber, timeout_s=90)
    with open(os.path.join(out, "rank0.json")) as fh:
        r = json.load(fh)
    assert r["raised"] is not None, r  # regression: endpoint calls "returned" local data forever
    assert r["seconds"] < 15, r
    assert r["stale_results"] == 0, r


@pytest.mark.parametrize("mode", ["endpoint", "ring"])
def test_non_contiguous_tensors_get_their_flips(mode):
    ranks = load_ranks(spawn(noncontig_worker, 2, mode, 3e-4), 2)
    union = {e for r in ranks for e in r["allreduce"]["logged"]}
    for r in ranks:
        for name, v in r.items():
            assert v["noncontig"], name
            if mode == "ring" and name == "allreduce":
                # a reduce-scatter hop's flip is summed, then forwarded to the other rank
                assert v["diff"] and set(v["diff"]) <= union, (mode, name)
            else:
                assert v["diff"] == v["logged"], (mode, name)  # flips land where they belong
    assert sum(v["n_logged"] for r in ranks for v in r.values()) > 0
    assert any(r["allreduce"]["n_logged"] for r in ranks)  # regression: endpoint skipped them


def test_clamp_guard_acts_only_on_flipped_elements():
    # a clean Inf (fp16 loss-scaling overflow) and a clean large value must reach the caller
    t = torch.tensor([float("inf"), 50.0, 1.0, 0.25, 0.5])
    # elem 2: exponent MSB (1 -> inf); elem 3: mantissa MSB (0.25 -> 0.375); elem 4: 0.5 -> 2^127
    offs = np.array([2 * 32 + 30, 3 * 32 + 22, 4 * 32 + 30])
    elem, bit, old, new, idx, _ = corrupt_received(t, offs)
    n, final = guard_flipped(t, np.unique(elem), 1.0)
    assert n == 2 and final.tolist() == [0.0, 0.375, 1.0]
    assert math.isinf(t[0].item()) and t[1].item() == 50.0  # clean values, even out of bounds, stay
    assert t[2:].tolist() == [0.0, 0.375, 1.0]
    h = torch.tensor([float("inf"), 3.0, 1.0], dtype=torch.float16)
    corrupt_received(h, np.array([2 * 16 + 14]))
    n, _ = guard_flipped(h, np.array([2]), 1.0)
    assert n == 1 and math.isinf(h[0].item()) and h[1].item() == 3.0 and h[2].item() == 0.0


def test_injected_noise_metric():
    m = {"perturbation_sq": {"gradients": 4.0}, "signal_sq": {"gradients": 100.0, "activations": 1.0}}
    assert Metrics.injected_noise(m, ["gradients"]) == pytest.approx(0.2)
    assert Metrics.injected_noise({"perturbation_sq": {}, "signal_sq": {"gradients": 5.0}}) == 0.0
    assert math.isnan(Metrics.injected_noise({}))
    assert Metrics.injected_noise({"perturbation_sq": {"g": math.inf}, "signal_sq": {"g": 1.0}}) == math.inf


# ---------------------------------------------------------------- undeliverable data fails the op
from _it_wrapper_workers import lost_frames_worker  # noqa: E402


@pytest.mark.parametrize("fec,ber,op", [("ieee", 1e-3, "allreduce"), ("bypass", 5e-2, "allreduce"),
                                        ("ieee", 1e-3, "broadcast"), ("ieee", 1e-3, "recv")])
def test_lost_frames_make_the_op_raise_on_every_rank(fec, ber, op):
    """Regression: at stream BER 1e-3 in ieee mode all 1024 of 1024 frames were lost and
    the tensor arrived bit-exact with 0 flips; bypass at 5e-2 gave 0 flips. Now the op raises
    LinkFailure (the rank that lost data at the op, its peer while waiting for it), later ops are
    refused, and the counters say why."""
    n = 2
    ranks = load_ranks(spawn(lost_frames_worker, n, fec, ber, op, timeout_s=120), n)
    for r in ranks:
        assert "crash" not in r, r.get("crash")
        assert r["type"] == "LinkFailure", r
        assert r["clean"] is not True  # nothing undeliverable was handed over as if it had arrived
        assert r["refused"] is True, r  # the queue pair stays in error
        assert r["seconds"] < 18, r  # found by polling the store, before the 20 s group timeout
        # at the op itself on every rank, the sender's included (a broadcast's root, a send): in
        # RDMA the requester's queue pair is the one that runs out of retries
        assert r["at"] == "op", r
    lost = [r for r in ranks if r["op_failures"] > 0]
    assert lost and all(r["frames_lost"] > 0 and r["frames_resent"] >= 7 * r["frames_lost"] for r in lost)
    assert any("NCCL_IB_RETRY_CNT=7" in r["raised"] for r in ranks)


def test_float_sum_allreduce_carries_a_loss_in_band_and_skips_the_store_otherwise():
    """A CPU float SUM all-reduce looks the failure key up only when its element 0 comes out
    non-finite: a rank that lost data adds NaN there, so a loss on rank 1 alone still fails the
    same all-reduce on rank 0; a NaN of the data's own costs a look-up and fails nothing; integer
    and MAX all-reduces look up at every op."""
    from _it_wrapper_workers import in_band_worker

    r0, r1 = load_ranks(spawn(in_band_worker, 2, timeout_s=120), 2)
    for r in (r0, r1):
        assert "crash" not in r, r.get("crash")
        assert r["sum_lookups"] == 0 and r["sum_ok"] is True
        assert r["int_lookups"] >= 1 and r["max_lookups"] >= 1
        assert r["nan_lookups"] >= 1 and r["nan_ok"] is True
    assert r1["raised"] is not None and "lost 1 frame(s)" in r1["raised"], r1
    # rank 0 lost nothing itself and fails the same all-reduce, from the in-band NaN and the store
    assert r0["raised"] is not None and "a link of the group failed" in r0["raised"], r0


def test_an_error_free_group_returns_the_inner_work_and_a_group_in_error_still_fails():
    """At BER 0 (generator or independent source) no link of the group can lose a frame, so an
    all-reduce has nothing to look up at completion and returns the inner backend's Work as it
    is; its message is still counted. A group in error (here set from outside) still fails it,
    and at BER > 0 the completion check stays (a Work of the wrapper's)."""
    from integration.process_group import ReplayProcessGroup, _FailedWork
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    for kind in ("generator", "independent"):
        g = ReplayProcessGroup.standalone(ReplayConfig(source=SourceConfig(ber=0.0, kind=kind)),
                                          timeout=timedelta(seconds=5))
        t = torch.arange(1000, dtype=torch.float32)
        w = g.allreduce([t])
        assert not isinstance(w, (_ReplayWork, _FailedWork)), (kind, type(w))
        w.wait()
        assert torch.equal(t, torch.arange(1000, dtype=torch.float32))
        assert g.metrics.total("messages") == 1
        g._failed = LinkFailure("set from outside", op="allreduce", rank=0)
        w = g.allreduce([t])
        assert isinstance(w, _FailedWork)
        with pytest.raises(LinkFailure, match="the group is in error"):
            w.wait()
    g = ReplayProcessGroup.standalone(ReplayConfig(source=SourceConfig(ber=1e-9, kind="independent")),
                                      timeout=timedelta(seconds=5))
    w = g.allreduce([torch.ones(1000)])
    assert isinstance(w, _ReplayWork)
    w.wait()


def test_every_rank_fails_the_collective_that_lost_the_frame_whatever_the_look_up_timing():
    """The training run below failed now and then (a gloo timeout after 120 s; 1 of 20 runs, and 6 of
    31 with logging): rank 0 lost a frame in step 2's gradient all-reduce and wrote the failure key
    while rank 1's completion of step 1's flag all-reduce had not yet looked the store up; rank 1
    found the key there, failed step 1 and stopped, and rank 0 waited in step 2's all-reduce for a
    peer that never issued it. Also (1 of 30 with logging) rank 0's own completion, run before its
    issuing thread put the group in error, took its own key for a peer's failure (no link, no
    NCCL_IB_RETRY_CNT in the run's report). Both interleavings forced here (each failed this test
    before the fix): each rank fails the gradients' all-reduce and only that one."""
    from _it_wrapper_workers import loss_order_worker

    r0, r1 = load_ranks(spawn(loss_order_worker, 2, timeout_s=120), 2)
    for r in (r0, r1):
        assert "crash" not in r, r.get("crash")
        assert r["flag"] is None, r  # the flag all-reduce completed before any frame was lost
        assert r["grads"] is not None, r
    assert r1["waited"] is True and r0["completed_first"] is True  # the forced interleavings happened
    assert "lost 1 frame(s) on link 1 -> 0" in r0["grads"] and "NCCL_IB_RETRY_CNT=7" in r0["grads"], r0
    assert r0["failed_link"] == [1, 0], r0  # its own loss, not a peer's
    assert "a link of the group failed" in r1["grads"], r1


def test_check_failures_leaves_a_peer_loss_in_the_next_collective_to_that_collective():
    """The training run below failed now and then (1 of 3-5 runs: a gloo "Connection closed by peer"
    or a 120 s send timeout in the failed run's gather): rank 0 ran ahead into step 2's gradient
    all-reduce (collective 9) and lost a frame there while rank 1, done with collectives 0..8, was at
    step 1's check_failures, which counted a loss at 9 (its next collective index) as one of its own
    past collectives: rank 1 stopped a collective early, rank 0 waited in 9 for its part. Here rank 1
    (no data moves: the fake backend) has issued collectives 0 and 1, and rank 0's loss is noted at 2."""
    from integration.agreement import _FAILED_AT_KEY, _FAILED_KEY
    from integration.process_group import ReplayProcessGroup
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    store = dist.HashStore()
    g = ReplayProcessGroup.standalone(ReplayConfig(source=SourceConfig(ber=0.0, seed=3)), rank=1, size=2,
                                      timeout=timedelta(seconds=5), store=store)
    for _ in range(2):
        g.allreduce([torch.ones(8)]).wait()
    store.set(_FAILED_AT_KEY.format(rank=0), "2 rank 0: allreduce lost 1 frame(s) on link 1 -> 0")
    store.set(_FAILED_KEY, "rank 0: allreduce lost 1 frame(s) on link 1 -> 0")
    g.check_failures()  # collective 2 not issued here yet: the loss is not this rank's to fail on
    assert g.failed is None
    g.allreduce([torch.ones(8)]).wait()  # collective 2 (no in-band NaN, no look-up: an error-free group)
    with pytest.raises(LinkFailure, match="a link of the group failed .rank 0: allreduce lost 1 frame"):
        g.check_failures()
    assert g._failed_at == 2


def test_a_lost_p2p_message_fails_every_pipeline_stage_well_before_the_timeout():
    """In a 3-stage pipeline, a lost activation 0 -> 1 made stage 1 raise, and stage 2,
    waiting on stage 1's send that never came, failed only at the 20 s group timeout (a gloo recv
    Work has no future to poll). Now its wait polls the group's store and raises LinkFailure."""
    from _it_wrapper_workers import pipeline_loss_worker

    ranks = load_ranks(spawn(pipeline_loss_worker, 3, timeout_s=120), 3)
    for r in ranks:
        assert "crash" not in r, r.get("crash")
        assert r["type"] == "LinkFailure", r
    assert ranks[1]["frames_lost"] > 0 and ranks[2]["frames_lost"] == 0  # stage 2 lost nothing itself
    assert "stopped waiting for recv from rank 1" in ranks[2]["raised"] and "lost" in ranks[2]["raised"]
    # the group timeout is 20 s; stage 2 fails within the store poll (50 ms) of stage 1's failure
    # (stage 1 itself may take seconds to get there on a loaded machine: first delivery, Numba load)
    assert ranks[2]["failed_at"] - ranks[1]["failed_at"] < 3.0, ranks
    assert ranks[2]["seconds"] < 15.0, ranks[2]


def test_a_stage_whose_own_receive_lost_frames_stops_waiting_on_a_stopped_stage():
    """Stage 1 of 0 -> 1 -> 2 lost its own receive 0 -> 1 with a receive from stage 2
    posted (1F1B); stage 2 failed by the store and shut its groups down, as ``phy802 train`` does.
    Stage 1, in error by its own loss, kept waiting for its inner receive (its peer might still
    need this rank's part moved) and failed only at the 20 s group timeout, with gloo's connection
    error instead of LinkFailure (~16-18 s into the wait). Now it finds stage 2's
    stopped marker in the store and raises LinkFailure at once."""
    from _it_wrapper_workers import pipeline_stop_worker

    ranks = load_ranks(spawn(pipeline_stop_worker, 3, timeout_s=120), 3)
    for r in ranks:
        assert "crash" not in r, r.get("crash")
        assert r["type"] == "LinkFailure", r
    assert "lost" in ranks[1]["own"] and ranks[2]["stopped"], ranks
    assert ranks[2]["stopped"] > ranks[1]["waits_from"], ranks  # stage 2 stopped while stage 1 waited
    assert ranks[1]["seconds"] < 5.0, ranks  # the group timeout is 20 s; the store poll is 50 ms
    assert "recv from rank 2" in ranks[1]["raised"] and "rank 2 stopped" in ranks[1]["raised"], ranks[1]


def test_stopped_marker_ends_an_own_loss_p2p_wait_and_never_raises_out_of_shutdown():
    """The marker behind the test above, in one process: shutdown / abort / mark_stopped write it,
    a rank in error by its own loss stops waiting on that peer only (not on a peer still running),
    and a store that is gone does not make shutdown raise."""
    from datetime import timedelta

    import torch.distributed as dist

    from integration.process_group import ReplayProcessGroup
    from integration.replay import LinkFailure, ReplayConfig

    store = dist.HashStore()

    def group(rank):
        return ReplayProcessGroup.standalone(ReplayConfig(), rank, 3, timeout=timedelta(seconds=5), store=store)

    g0, g1, g2 = group(0), group(1), group(2)
    g1._failed = LinkFailure("own loss", link=(0, 1), op="recv", frames_lost=3, rank=1)
    g1._p2p_poll("recv from rank 0", 0)  # peer running: this rank keeps waiting
    g0.abort()
    with pytest.raises(LinkFailure, match="rank 1 stopped waiting for recv from rank 0: rank 0 stopped") as ei:
        g1._p2p_poll("recv from rank 0", 0)
    assert ei.value.link == (0, 1) and ei.value.frames_lost == 3 and ei.value.rank == 1
    g1._p2p_poll("send to rank 2", 2)  # rank 2 still runs
    g2.shutdown()
    with pytest.raises(LinkFailure, match="rank 2 stopped"):
        g1._p2p_poll("send to rank 2", 2)

    class Gone:
        def set(self, *a):
            raise RuntimeError("store gone")

    g0._store = Gone()
    g0.shutdown()  # does not raise


def test_training_run_that_loses_a_frame_fails_visibly():
    """A run at a BER where a frame is lost stops on every rank at the same op and says so."""
    from integration.train import build_config, run_training

    cfg = build_config(parallel="ddp", ber=3e-5, fec="ieee", source="independent", steps=40, n_layer=1, n_embd=16,
                       n_head=2, block_size=16, batch_size=4, eval_interval=10, comm_timeout_s=120, corpus="stdlib")
    r = run_training(cfg, timeout_s=400)
    assert r["failed"] is True and r["op_failures"] >= 1 and r["frames_lost"] >= 1, r.get("failure")
    assert r["frames_resent"] >= 7 * r["frames_lost"]
    assert "NCCL_IB_RETRY_CNT=7" in r["failure"] and r["failed_step"] is not None
    assert r["final_val_loss"] != r["final_val_loss"]  # NaN: the job did not finish
    assert r["ber_is"] == "payload-stream BER"


def test_experiment_table_has_frame_columns_and_which_ber():
    from integration.experiment import COLUMNS, aggregate, table_md

    def one(ber, lost, kind):
        return {"parallel": "ddp", "ber": ber, "guard": "none", "seed": 1, "final_val_loss": 2.0,
                "delta_val_loss": 0.0, "injected_noise": 0.0, "injected_noise_step": 0.0, "weight_dist_shadow": 0.0,
                "replica_divergence": 0.0, "flips": 0, "nonfinite_events": 0, "nonfinite_steps": 0,
                "overflow_steps": 0, "skipped_steps": 0, "frames_lost": lost, "frames_resent": 8 * lost,
                "op_failures": int(lost > 0), "step_ms": 1.0, "first_nonfinite_loss_step": None,
                "evals": [[0, 4.0]], "train_loss": [4.0], "metrics": {}, "source_kind": kind}

    rows = aggregate([one(0.0, 0, "independent"), one(1e-5, 3, "generator")])
    assert {"frames_lost", "frames_resent", "op_failures", "ber_is"} <= set(COLUMNS)
    md = table_md(rows)
    assert "pre-FEC line BER" in md and "error-free" in md and "| 3 | 24 | 1 |" in md


def test_fsdp2_hooks_carry_the_link_errors_and_are_bit_identical_at_ber_0():
    """FSDP2's supported comm hooks (set_custom_all_gather / set_custom_reduce_scatter)
    run the parameter all-gathers and gradient reduce-scatters of a model sharded over a stock gloo
    group through the phy802 group: bit-identical to no hooks at BER 0, flips logged at 3e-4."""
    from _it_wrapper_workers import fsdp_hooks_worker

    ranks = load_ranks(spawn(fsdp_hooks_worker, 2, timeout_s=240), 2)
    for r in ranks:
        assert "crash" not in r, r.get("crash")
        assert r["hooked"] == {"clean": 3, "noisy": 3}
        assert r["clean_identical"] is True
        assert r["clean"]["flips"] == {} and r["clean"]["messages"].get("params", 0) > 0
        assert r["clean"]["messages"].get("gradients", 0) > 0
        assert {"all_gather_single", "reduce_scatter_single"} <= set(r["noisy"]["ops"])
        assert "phy802 group" in r["refused_plain"]
    assert any(r["noisy"]["flips"].get("params", 0) > 0 for r in ranks)
    assert any(r["noisy"]["flips"].get("gradients", 0) > 0 for r in ranks)
    assert any(r["noisy_differs"] for r in ranks)


def test_a_loss_is_in_the_store_before_the_lost_op_is_issued():
    """TCPStore's set returns before the server has applied it (no reply), so a rank that loses a
    frame asks the store a question on the same connection (check) before it issues the op: the
    server answers only after applying the sets, and a peer completing the op finds the key."""
    from integration.process_group import _FAILED_KEY, ReplayProcessGroup
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    calls: list[str] = []

    class Recording(dist.Store):
        def __init__(self):
            super().__init__()
            self._d = {}

        def set(self, key, value):
            calls.append(f"set {key}")
            self._d[key] = value if isinstance(value, bytes) else str(value).encode()

        def get(self, key):
            return self._d[key]

        def check(self, keys):
            calls.append(f"check {','.join(keys)}")
            return all(k in self._d for k in keys)

    class Inner:  # records when the op reaches the transport
        def __init__(self, fake):
            self._fake = fake

        def allreduce(self, tensors, opts):
            calls.append("issue allreduce")
            return self._fake.allreduce(tensors, opts)

    cfg = ReplayConfig(source=SourceConfig(ber=1e-12, seed=3, kind="independent"))
    g = ReplayProcessGroup.standalone(cfg, timeout=timedelta(seconds=5), store=Recording())
    g._forced_inner = Inner(g._forced_inner)
    orig = g._deliver
    g._deliver = lambda *a, **k: dataclasses.replace(orig(*a, **k), frames_lost=1, frames_resent=7)
    with pytest.raises(LinkFailure):
        g.allreduce([torch.ones(4096)]).wait()
    first = calls[:calls.index("issue allreduce")]
    assert first[-3:] == ["set phy802_qp_error/0", f"set {_FAILED_KEY}", f"check {_FAILED_KEY}"], calls
