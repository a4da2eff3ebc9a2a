"""A job that fails (data not delivered, a rank dead) exits 1 with the cause on stderr, in text and
JSON mode alike, and still writes its JSON / report (``phy802 train`` and ``phy802 experiment``)."""

import json
import math

import pytest

from integration.train import failed_when
from phy802.cli import main

TINY = ["--corpus", "stdlib", "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "16",
        "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--val-tokens", "64", "--timeout", "300"]
#: at payload-stream BER 1e-2 every frame of a gradient bucket is hit: IEEE mode cannot deliver it
LOSSY = ["--parallel", "ddp", "--world-size", "2", "--fec", "ieee", "--source", "independent", "--ber", "1e-2",
         "--steps", "2", "--seed", "1"]


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    """One real run whose first gradient all-reduce loses frames: (exit code, stdout, stderr, result.json)."""
    out = tmp_path_factory.mktemp("failed") / "out"
    import contextlib  # capsys is function-scoped: captured by hand
    import io

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["train", *LOSSY, "--out", str(out), "--json", *TINY])
    with open(out / "result.json", encoding="utf-8") as fh:
        written = json.load(fh)
    return rc, o.getvalue(), e.getvalue(), written


def test_train_json_of_a_failed_run_exits_1_with_the_cause(failed_run):
    """Regression: it printed ``"failed": true`` and exited 0."""
    rc, out, err, written = failed_run
    doc = json.loads(out)
    assert rc == 1
    assert doc["failed"] is True and doc["frames_lost"] >= 1 and written["failed"] is True
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"phy802 train: the run failed {failed_when(doc['failed_step'])}: ") and "NCCL_IB_RETRY_CNT=7" in last
    assert "internal error" not in err


def test_train_text_of_a_failed_run_exits_1_with_the_cause(failed_run, monkeypatch, capsys):
    """Regression: the summary of a run that failed before its first step ended in an IndexError (exit 3)."""
    import integration.train as train

    written = failed_run[3]
    assert written["train_loss"] == []  # failed in step 0: nothing to print as the final train loss
    monkeypatch.setattr(train, "run_training", lambda cfg, **kw: dict(written))
    rc = main(["train", *LOSSY, *TINY])
    cap = capsys.readouterr()
    assert rc == 1, cap.err
    when = failed_when(written["failed_step"])
    assert f"RUN FAILED {when}" in cap.out and "no training step finished" in cap.out
    assert cap.err.strip().splitlines()[-1].startswith(f"phy802 train: the run failed {when}: ")
    assert "internal error" not in cap.err


def test_train_json_when_a_rank_dies_still_writes_a_document(monkeypatch, capsys):
    """A rank that dies (killed, or raised) fails the job: exit 1, the cause on stderr and, with
    --json, a document saying so (regression: nothing on stdout)."""
    import integration.train as train

    def dead(cfg, **kw):
        raise RuntimeError("a training process died: process 1 terminated with signal SIGKILL")

    monkeypatch.setattr(train, "run_training", dead)
    rc = main(["train", *LOSSY, "--json", *TINY])
    cap = capsys.readouterr()
    assert rc == 1
    doc = json.loads(cap.out)
    assert doc["failed"] is True and "SIGKILL" in doc["failure"] and doc["config"]["world_size"] == 2
    assert "SIGKILL" in cap.err


def _per_seed(ber: float, failed: bool) -> dict:
    return {"parallel": "ddp", "ber": ber, "guard": "none" if ber else "-", "seed": 1, "link_seed": 1 if ber else None,
            "final_val_loss": math.nan if failed else 2.0, "delta_val_loss": math.nan if failed else 0.0,
            "injected_noise": 0.0, "injected_noise_step": 0.0, "weight_dist_shadow": math.nan,
            "replica_divergence": math.nan if failed else 0.0, "flips": 5, "nonfinite_events": 0,
            "nonfinite_steps": 0, "overflow_steps": 0, "skipped_steps": 0, "frames_lost": 3 if failed else 0,
            "frames_resent": 24 if failed else 0, "op_failures": int(failed), "step_ms": 1.0,
            "first_nonfinite_loss_step": 0 if failed else None, "evals": [[0, 4.0], [0, math.nan if failed else 3.0]],
            "train_loss": [], "metrics": {}, "source_kind": "independent",
            "failed": failed, "failed_step": 0 if failed else None,
            "failure": "a link of the group failed (NCCL_IB_RETRY_CNT=7)" if failed else None}


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_experiment_with_a_failed_run_exits_1_and_names_it(as_json, tmp_path, monkeypatch, capsys):
    """Regression: a sweep with a failed run exited 0 and showed the row only as NaN (as if it had diverged)."""
    import integration.experiment as experiment

    rows = experiment.aggregate([_per_seed(0.0, False), _per_seed(1e-2, True)])
    monkeypatch.setattr(experiment, "run_experiment", lambda spec, **kw: rows)
    out = tmp_path / "exp"
    rc = main(["experiment", "--out", str(out), "--bers", "1e-2", "--guards", "none", "--parallel", "ddp",
               "--fec", "ieee", "--source", "independent", "--steps", "2", "--no-progress", *TINY]
              + (["--json"] if as_json else []))
    cap = capsys.readouterr()
    assert rc == 1
    assert "run ddp BER 0.01 guard none seed 1 failed at step 0: a link of the group failed" in cap.err
    table = (out / "table.md").read_text()  # the report is still written, and says which run failed
    assert "FAILED (step 0)" in table and "NaN (step" not in table
    assert rows[1]["died"] == [] and rows[1]["failed_runs"] == 1
    if as_json:
        doc = json.loads(cap.out)
        assert doc["failed"] is True and [r["failed_runs"] for r in doc["rows"]] == [0, 1]
    else:
        assert "FAILED (step 0)" in cap.out


@pytest.mark.slow
def test_experiment_sweep_with_undeliverable_frames_exits_1(tmp_path, capsys):
    """End to end: a real sweep whose noisy run cannot deliver its gradients."""
    out = tmp_path / "exp"
    rc = main(["experiment", "--out", str(out), "--bers", "1e-2", "--guards", "none", "--parallel", "ddp",
               "--fec", "ieee", "--source", "independent", "--steps", "2", "--no-progress", "--json", *TINY])
    cap = capsys.readouterr()
    assert rc == 1
    rows = json.loads(cap.out)["rows"]
    assert [r["failed_runs"] for r in rows] == [0, 1] and math.isfinite(rows[0]["final_val_loss"])
    assert " failed " in cap.err and "NCCL_IB_RETRY_CNT=7" in cap.err and (out / "results.json").exists()


@pytest.mark.slow
def test_a_failed_run_under_torchrun_fails_every_rank(tmp_path):
    """Under torchrun each rank is a process of its own: every rank of a failed job exits 1, so
    that torchrun reports the job failed (it exited 0 on every rank)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
           "phy802.cli", "train", *LOSSY, "--out", str(tmp_path / "out"), "--json", *TINY]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode != 0, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert doc["failed"] is True
    assert "phy802 train: rank 1: the run failed" in p.stderr and "phy802 train: the run failed" in p.stderr


def test_experiment_refuses_a_run_it_cannot_make_before_the_first_starts(monkeypatch, tmp_path, capsys):
    """A parallelism later in --parallel whose configuration is invalid (here: a 2-stage pipeline of a
    1-layer model, which DDP runs) is refused up front (exit 2), not after the first parallelism's runs."""
    import integration.experiment as experiment

    started = []
    monkeypatch.setattr(experiment, "run_many", lambda *a, **k: started.append(1) or [])
    rc = main(["experiment", "--out", str(tmp_path / "exp"), "--parallel", "ddp,pp", "--bers", "1e-5", "--guards", "none",
               "--steps", "1", "--no-progress", *TINY])
    assert rc == 2 and started == []
    assert "a pipeline of 1 blocks has at most 1 stages" in capsys.readouterr().err


def test_experiment_json_when_a_rank_dies_still_writes_a_document(monkeypatch, tmp_path, capsys):
    """A sweep whose ranks die: exit 1, the cause on stderr and, with --json, a document saying so."""
    import integration.experiment as experiment

    def dead(spec, **kw):
        raise RuntimeError("a training process died: process 0 terminated with signal SIGKILL")

    monkeypatch.setattr(experiment, "run_experiment", dead)
    rc = main(["experiment", "--out", str(tmp_path / "exp"), "--parallel", "ddp", "--bers", "1e-5", "--guards",
               "none", "--steps", "1", "--no-progress", "--json", *TINY])
    cap = capsys.readouterr()
    assert rc == 1 and "SIGKILL" in cap.err
    doc = json.loads(cap.out)
    assert doc["failed"] is True and "SIGKILL" in doc["failure"] and doc["rows"] == []


def _a_rank_dies(monkeypatch):
    """torch's process context as it reports a rank killed (SIGKILL, e.g. by the OOM killer): run_many's
    real handling of it runs, no process is started."""
    import torch.multiprocessing as mp

    class Dead:
        processes: list = []
        error_files: list = []

        def join(self, timeout=None):
            raise mp.ProcessExitedException("process 1 terminated with signal SIGKILL", error_index=1, error_pid=0,
                                            exit_code=-9, signal_name="SIGKILL")

    monkeypatch.setattr(mp, "start_processes", lambda *a, **k: Dead())


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_tradeoff_whose_small_experiment_loses_a_rank_exits_1(as_json, tmp_path, monkeypatch, capsys):
    """Regression: tradeoff without --results runs its own experiment; a rank of it that died ended
    the command as 'internal error (a bug in phy802 ...)', exit 3."""
    _a_rank_dies(monkeypatch)
    out = tmp_path / "t"
    rc = main(["tradeoff", "--out", str(out), "--bers", "1e-5", "--steps", "2", "--ranks", "8", "--modes", "kp4:ieee",
               "--trials", "5"] + (["--json"] if as_json else []))
    cap = capsys.readouterr()
    assert rc == 1, cap.err
    assert cap.err.strip().splitlines()[-1] == ("phy802 tradeoff: a training process died: process 1 terminated "
                                                "with signal SIGKILL")
    assert "internal error" not in cap.err and not out.exists()
    if as_json:
        doc = json.loads(cap.out)
        assert doc["failed"] is True and "SIGKILL" in doc["failure"]


def test_any_command_whose_job_fails_exits_1(monkeypatch, capsys):
    """The demo's training (and any command running a job) ends the same way when its workers fail."""
    import phy802.cli.demo as demo
    from phy802.runtime.workers import JobFailed

    def fails(args):
        raise JobFailed("a training process failed: ValueError: boom")

    monkeypatch.setattr(demo, "run", fails)
    assert main(["demo", "--out", "nosuch-demo"]) == 1
    assert capsys.readouterr().err.strip() == "phy802 demo: a training process failed: ValueError: boom"
