"""``phy802 train`` and ``phy802 experiment`` end to end (tiny model, stdlib corpus)."""

import json
import os
import subprocess
import sys

import pytest

import torch  # noqa: F401  (a declared dependency: a missing torch must fail, not skip)

from phy802.cli import main

TINY = ["--corpus", "stdlib", "--n-layer", "2", "--n-embd", "32", "--n-head", "2", "--block-size", "16",
        "--batch-size", "4", "--microbatches", "2", "--eval-interval", "2", "--eval-iters", "1", "--timeout", "120"]


def test_train_cli_json(capsys, tmp_path):
    rc = main(["train", "--parallel", "pp", "--world-size", "2", "--fec", "bypass", "--ber", "1e-4", "--steps", "3",
               "--seed", "2", "--source", "independent", "--guard", "nan_to_zero_clamp", "--out", str(tmp_path),
               "--log-flips", "--json", *TINY])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["config"]["parallel"] == "pp" and len(r["train_loss"]) == 3
    assert sum(r["metrics"]["errors_injected"].values()) > 0
    assert os.path.exists(tmp_path / "params.pt") and os.path.exists(tmp_path / "result.json")
    logs = [json.load(open(tmp_path / f"log_rank{k}.json")) for k in range(2)]
    assert sum(len(lg["records"]) for lg in logs) == sum(r["metrics"]["errors_injected"].values())
    assert {rec["cls"] for lg in logs for rec in lg["records"]} <= {"activations", "activation_grads"}


def test_train_cli_bad_input(capsys):
    assert main(["train", "--ber", "2", "--steps", "1", *TINY]) == 2
    assert "--ber" in capsys.readouterr().err
    assert main(["train", "--fec", "nope", "--steps", "1", *TINY]) == 2


@pytest.mark.slow
def test_experiment_cli_writes_table_and_plots(tmp_path, capsys):
    out = tmp_path / "exp"
    rc = main(["experiment", "--out", str(out), "--bers", "1e-4", "--guards", "none,nan_to_zero_clamp",
               "--steps", "4", "--source", "independent", "--json", *TINY])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["parallel"], r["ber"]) for r in rows][:3] == [("ddp", 0.0), ("ddp", 1e-4), ("ddp", 1e-4)]
    assert rows[0]["weight_noise"] == 0.0 and rows[0]["delta_val_loss"] == 0.0
    assert any(r["weight_noise"] > 0 for r in rows)
    for name in ("table.csv", "table.md", "results.json", "loss_ddp.png", "loss_pp.png"):
        assert (out / name).stat().st_size > 0
    # a second run replaces the folder atomically
    assert main(["experiment", "--out", str(out), "--bers", "1e-4", "--guards", "none", "--parallel", "ddp",
                 "--steps", "2", "--source", "independent", *TINY]) == 0
    assert not (out / "loss_pp.png").exists()


@pytest.mark.slow
def test_train_under_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "phy802.cli",
           "train", "--parallel", "ddp", "--ber", "1e-4", "--steps", "3", "--source", "independent", "--out",
           str(tmp_path), "--json", *TINY]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout[p.stdout.index("{"):])
    assert r["config"]["world_size"] == 2 and sum(r["metrics"]["errors_injected"].values()) > 0


def test_ber0_is_error_free_even_with_a_trace_source(tmp_path):
    """The experiment's shadow run (BER 0) must not replay a trace (regression: it did)."""
    import argparse

    from phy802.cli.train import add_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--source", "trace", "--trace", str(tmp_path / "t.npz")])
    shadow = config_from_args(args, parallel="ddp", ber=0.0, guard="none", steps=1)
    noisy = config_from_args(args, parallel="ddp", ber=1e-5, guard="none", steps=1)
    assert shadow.replay.source.kind != "trace" and shadow.replay.source.ber == 0.0
    assert noisy.replay.source.kind == "trace" and noisy.replay.source.trace == str(tmp_path / "t.npz")
