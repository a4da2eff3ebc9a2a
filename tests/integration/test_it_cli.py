"""``phy802 train`` and ``phy802 experiment`` end to end (tiny model, stdlib corpus)."""

import json
import os
import shutil
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


def _rc(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse usage errors
        return exc.code


def test_train_cli_bad_input(capsys):
    assert _rc(["train", "--ber", "2", "--steps", "1", *TINY]) == 2
    assert "--ber" in capsys.readouterr().err
    assert _rc(["train", "--fec", "nope", "--steps", "1", *TINY]) == 2


@pytest.mark.slow
def test_experiment_cli_writes_table_and_plots(tmp_path, capsys):
    out = tmp_path / "exp"
    rc = main(["experiment", "--out", str(out), "--bers", "1e-4", "--guards", "none,nan_to_zero_clamp",
               "--steps", "4", "--source", "independent", "--fec", "bypass", "--json", *TINY])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["parallel"], r["ber"]) for r in rows][:3] == [("ddp", 0.0), ("ddp", 1e-4), ("ddp", 1e-4)]
    assert rows[0]["weight_dist_shadow"] == 0.0 and rows[0]["delta_val_loss"] == 0.0
    assert rows[0]["injected_noise"] == 0.0
    assert any(r["weight_dist_shadow"] > 0 for r in rows) and any(r["injected_noise"] > 0 for r in rows)
    for name in ("table.csv", "table.md", "results.json", "loss_ddp.png", "loss_pp.png"):
        assert (out / name).stat().st_size > 0
    # a second run updates its own folder: its stale files go, nothing else is touched
    (out / "mine.txt").write_text("user data")
    second = ["experiment", "--out", str(out), "--bers", "1e-4", "--guards", "none", "--parallel", "ddp",
              "--steps", "2", "--source", "independent", "--fec", "bypass", *TINY]
    assert main(second) == 2  # its runs/ holds the first campaign's runs: refused, not mixed in
    assert "a run of another campaign" in capsys.readouterr().err
    shutil.rmtree(out / "runs")  # a new campaign in the same folder
    assert main(second) == 0
    assert not (out / "loss_pp.png").exists() and (out / "mine.txt").read_text() == "user data"


@pytest.mark.slow
def test_train_under_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "phy802.cli",
           "train", "--parallel", "ddp", "--ber", "1e-4", "--steps", "3", "--source", "independent", "--fec", "bypass",
           "--out",
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


BAD_TRAIN = [
    (["--lr", "nan"], "--lr"), (["--lr", "-1"], "--lr"), (["--batch-size", "0"], "--batch-size"),
    (["--eval-iters", "0"], "--eval-iters"), (["--block-size", "0"], "--block-size"), (["--n-head", "3"], "n_head"),
    (["--microbatches", "0"], "--microbatches"), (["--timeout", "0"], "--timeout"), (["--timeout", "inf"], "--timeout"),
    (["--fec", "kp4"], "--code kp4 --fec ieee"), (["--code", "kp5"], "--code"), (["--log-flips"], "--out"),
    (["--source", "generator", "--trace", "TRACE"], "--trace"), (["--source", "trace"], "--trace"),
    (["--trace", "MISSING"], "no such trace"), (["--trace", "CORRUPT"], "CORRUPT"), (["--parallel", "tp"], "--parallel"),
    (["--device", "cuda"], "cuda"), (["--precision", "fp16", "--parallel", "pp"], "pp"),
]
try:  # a generator without --code support refuses other codes up front
    import inspect

    from protocol.trace import LiveSource

    if "code" not in inspect.signature(LiveSource).parameters:
        BAD_TRAIN.append((["--code", "kr4", "--source", "generator"], "kp4 only"))
except ImportError:  # pragma: no cover
    pass


@pytest.mark.parametrize("extra,needle", BAD_TRAIN, ids=[" ".join(e) for e, _ in BAD_TRAIN])
def test_train_rejects_bad_input_before_spawning(extra, needle, tmp_path, capsys, monkeypatch):
    import tempfile

    if extra == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    (tmp_path / "CORRUPT").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "TRACE").write_bytes(b"x")
    extra = [str(tmp_path / x) if x in ("CORRUPT", "TRACE", "MISSING") else x for x in extra]
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    argv = ["train", "--steps", "1", *TINY]
    argv = [a for i, a in enumerate(argv) if not (a == "--timeout" or (i and argv[i - 1] == "--timeout"))]
    assert _rc(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and needle in err[-1] and "Traceback" not in "\n".join(err)
    assert list(tmpdir.iterdir()) == []  # nothing started, nothing left


def test_experiment_refuses_foreign_out(tmp_path, capsys):
    user = tmp_path / "data"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    assert _rc(["experiment", "--out", str(user), "--steps", "1", *TINY]) == 2
    assert "choose a new or empty folder" in capsys.readouterr().err and (user / "thesis.tex").read_text() == "precious"
    f = tmp_path / "afile"
    f.write_text("keep")
    assert _rc(["experiment", "--out", str(f), "--steps", "1", *TINY]) == 2
    assert f.read_text() == "keep"


def _rows():
    from integration.experiment import aggregate

    def one(par, ber, guard, seed, loss, died=None):
        return {"parallel": par, "ber": ber, "guard": guard, "seed": seed, "final_val_loss": loss,
                "delta_val_loss": loss - 2.0, "injected_noise": 0.1 * seed if ber else 0.0, "injected_noise_step": 0.0,
                "weight_dist_shadow": 0.01, "replica_divergence": 0.0, "flips": 3, "nonfinite_events": 0,
                "nonfinite_steps": 0, "overflow_steps": 0, "skipped_steps": 0, "step_ms": 1.0,
                "first_nonfinite_loss_step": died, "evals": [[0, 4.0], [10, loss]], "train_loss": [4.0, loss],
                "metrics": {}, "source_kind": "independent"}

    per_seed = [one("ddp", 0.0, "-", s, 2.0) for s in (1, 2, 3)]
    per_seed += [one("ddp", 1e-5, g, s, 2.0 + 0.1 * s) for g in ("exponent_protection", "none") for s in (1, 2, 3)]
    per_seed += [one("ddp", 1e-5, "nan_to_zero_clamp", s, float("nan") if s == 2 else 2.1, 7 if s == 2 else None)
                 for s in (1, 2, 3)]
    return aggregate(per_seed)


def test_seed_statistics_and_table():
    from scipy.stats import t

    rows = _rows()
    r = [r for r in rows if r["guard"] == "none"][0]
    assert r["seeds"] == 3 and r["delta_val_loss"] == pytest.approx(0.2)
    assert r["delta_val_loss_ci95"] == pytest.approx(t.ppf(0.975, 2) * 0.1 / 3 ** 0.5)
    from integration.experiment import table_md

    md = table_md(rows)
    assert "NaN in 1/3 seeds" in md and "±" in md


def test_write_report_never_touches_foreign_files(tmp_path):
    import os
    import stat

    from integration.experiment import MARKER, OutputExists, write_report

    rows = _rows()
    out = tmp_path / "new"
    names = write_report(rows, str(out), {})
    assert sorted(os.listdir(out)) == sorted(names + [MARKER])
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~_umask()  # normal permissions, not 0700
    (out / "notes.txt").write_text("mine")
    write_report([r for r in rows if r["guard"] != "none"], str(out), {})  # our own folder: updated in place
    assert (out / "notes.txt").read_text() == "mine"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "table.md").write_text("user's table")
    (foreign / "x.dat").write_text("user data")
    with pytest.raises(OutputExists):
        write_report(rows, str(foreign), {})
    assert (foreign / "table.md").read_text() == "user's table"
    write_report(rows, str(foreign), {}, force=True)  # documented: only the output set's names are written
    assert (foreign / "x.dat").read_text() == "user data"
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no staging folder left


def _umask() -> int:
    import os

    m = os.umask(0)
    os.umask(m)
    return m


def test_no_temp_leftovers_on_success_or_timeout(tmp_path, monkeypatch, capsys):
    import tempfile

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    argv = ["train", "--steps", "1", "--ber", "1e-4", "--source", "independent", "--fec", "bypass", *TINY]
    assert main(argv) == 0
    assert list(tmpdir.iterdir()) == []
    argv = [a if a != "120" else "0.5" for a in argv]  # --timeout 0.5: the ranks cannot even start
    assert main(argv) == 1
    assert "did not finish" in capsys.readouterr().err
    assert list(tmpdir.iterdir()) == []


def test_comm_log_is_a_config_field_not_an_environment_variable(tmp_path, monkeypatch, capsys):
    """--comm-log reaches the ranks in the run's configuration; it used to be set as an environment
    variable of this process, which outlived the command (a later in-process run wrote the log again)."""
    import integration.train as train

    seen = []

    def fake_run(cfg, **kw):
        seen.append(cfg)
        raise RuntimeError("stop here")

    monkeypatch.setattr(train, "run_training", fake_run)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--steps", "1", "--comm-log", "comm.jsonl", *TINY]) == 1
    assert seen[0].comm_log == str(tmp_path / "comm.jsonl")
    assert "PHY802_COMMLOG" not in os.environ
    assert main(["train", "--steps", "1", *TINY]) == 1 and seen[1].comm_log is None
    capsys.readouterr()
