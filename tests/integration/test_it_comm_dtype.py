"""``comm_dtype`` (``--comm-dtype``): DDP's gradient all-reduce in bf16 / fp16 over the phy802 group,
against torch's own compression hooks over plain gloo, and flips landing on 16-bit words."""

import dataclasses
import json

import pytest
import torch

from integration.replay import ReplayConfig
from integration.sources import SourceConfig
from integration.train import TrainConfig, run_many

TINY = dict(steps=3, corpus="stdlib", n_layer=2, n_embd=32, n_head=2, block_size=16, batch_size=4,
            eval_interval=100, eval_iters=1, val_tokens=64, comm_timeout_s=60.0)


def _params(r):
    return torch.load(f"{r['out_dir']}/params.pt")


NOISY = ReplayConfig(source=SourceConfig(ber=3e-4, seed=3, kind="independent", fec="bypass"))


def _base(dt):
    return TrainConfig(parallel="ddp", world_size=2, comm_dtype=dt, **TINY)


# fp16 (with its GradScaler) is slow-marked: each set of 2-rank runs takes ~15-30 s here
@pytest.fixture(scope="module", params=["bf16", pytest.param("fp16", marks=pytest.mark.slow)])
def runs(request, tmp_path_factory):
    base = _base(request.param)
    cfgs = [dataclasses.replace(base, wrapper=False),  # torch's own hook over gloo
            base,  # the phy802 group at BER 0 (group mode: DDP over the phy802 group, our hook)
            dataclasses.replace(base, replay=NOISY, dump_logs=True)]
    return request.param, run_many(cfgs, timeout_s=300, out_dir=str(tmp_path_factory.mktemp("comm")))


def _same(a, b):
    return torch.equal(_params(a), _params(b)) and a["train_loss"] == b["train_loss"]


def test_ber0_is_bit_identical_to_torch_s_compression_hook(runs):
    _dt, (torch_hook, group, _) = runs
    assert _same(group, torch_hook)
    # the gradients crossed the phy802 group in 16 bits: each rank received every parameter's
    # gradient once a step (endpoint mode), 16 payload bits each
    assert group["metrics"]["payload_bits"]["gradients"] == 2 * TINY["steps"] * group["n_params"] * 16


@pytest.mark.slow  # three 2-rank runs, ~25 s
def test_hooks_mode_too_and_the_16_bit_all_reduce_differs_from_fp32(tmp_path):
    base = _base("bf16")
    torch_hook, hooks, fp32 = run_many([dataclasses.replace(base, wrapper=False),
                                        dataclasses.replace(base, replay_via="hooks"),
                                        dataclasses.replace(base, comm_dtype="fp32", replay_via="hooks")],
                                       timeout_s=300, out_dir=str(tmp_path))
    assert _same(hooks, torch_hook)  # DDP on gloo, our hook over the phy802 group
    assert not torch.equal(_params(hooks), _params(fp32))  # the 16-bit all-reduce did happen
    # the gradients crossed the phy802 group as 2-byte elements: half fp32's payload bits
    assert hooks["metrics"]["payload_bits"]["gradients"] * 2 == fp32["metrics"]["payload_bits"]["gradients"]


def test_flips_land_on_16_bit_words(runs):
    dt, (_, _, noisy) = runs
    recs = []
    for rank in (0, 1):
        with open(f"{noisy['out_dir']}/log_rank{rank}.json", encoding="utf-8") as fh:
            recs += [f for f in json.load(fh)["records"] if f["cls"] == "gradients"]
    assert len(recs) > 20
    bits = [f["bit"] for f in recs]
    assert max(bits) < 16 and max(bits) >= 8  # bit index within a 16-bit word, exponents hit too
    assert noisy["config"]["comm_dtype"] == dt


def test_comm_dtype_is_refused_outside_ddp():
    for par in ("fsdp", "pp"):
        with pytest.raises(ValueError, match="comm_dtype"):
            TrainConfig(parallel=par, world_size=2, comm_dtype="bf16", **TINY)
    with pytest.raises(ValueError, match="comm_dtype"):
        TrainConfig(comm_dtype="fp8")
