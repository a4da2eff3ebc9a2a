"""What a training run delivered and what outlives its steps: the payload BER it actually delivered
(beside the BER it was given), why a run at BER > 0 delivered no flip, and the weights that an
Inf/NaN AdamW state froze."""

import dataclasses
import json

import pytest

from integration.replay import ReplayConfig
from integration.sources import SourceConfig
from integration.train import TrainConfig, run_many
from phy802.cli import main
from phy802.stats import clopper_pearson

TINY = dict(steps=4, corpus="stdlib", n_layer=2, n_embd=32, n_head=2, block_size=16, batch_size=4,
            eval_interval=100, eval_iters=1, val_tokens=512, comm_timeout_s=60.0)
CLI_TINY = ["--corpus", "stdlib", "--n-layer", "2", "--n-embd", "32", "--n-head", "2", "--block-size", "16",
            "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--val-tokens", "512", "--timeout", "120"]


@pytest.fixture(scope="module")
def noclip(tmp_path_factory):
    """DDP x2 without global clipping: error-free, and payload BER 1e-4 (independent flips, bypass)."""
    base = TrainConfig(parallel="ddp", world_size=2, grad_clip=0.0, **TINY)
    noisy = ReplayConfig(source=SourceConfig(ber=1e-4, seed=5, kind="independent", fec="bypass"))
    return run_many([base, dataclasses.replace(base, replay=noisy, dump_logs=True)], timeout_s=300,
                    out_dir=str(tmp_path_factory.mktemp("noclip")))


def test_frozen_weights_counted_with_errors_and_zero_without(noclip):
    clean, noisy = noclip
    assert clean["frozen_weights"] == 0 and clean["first_frozen_step"] is None
    # ~100 flips per step and rank, 1 in 32 on an fp32 element's top exponent bit: |g| ~ 1e35, g^2 = inf
    assert noisy["frozen_weights"] > 0 and 0 <= noisy["first_frozen_step"] < TINY["steps"]
    assert len(noisy["frozen_weights_replicas"]) == 2


def test_gradient_elements_hit_and_their_noise_bound_zero_without_errors(noclip):
    """The count against the flip log each rank wrote (one dict per flip: an independent count),
    and the bound lr x sqrt(count)."""
    clean, noisy = noclip
    assert clean["grad_elements_hit"] == 0 and clean["noise_bound"] == 0.0
    assert noisy["grad_hits_counted"] == "elements" and noisy["log_dropped"] == 0
    hit = set()
    for rank in (0, 1):
        with open(f"{noisy['out_dir']}/log_rank{rank}.json", encoding="utf-8") as fh:
            hit |= {(rank, f["seq"], f["hop"], tuple(f["link"]), f["element"]) for f in json.load(fh)["records"]
                    if f["cls"] in ("gradients", "tied_grads")}
    flips = noisy["metrics"]["errors_injected"]["gradients"]
    assert 0 < noisy["grad_elements_hit"] == len(hit) <= flips
    assert noisy["noise_bound"] == pytest.approx(noisy["config"]["lr"] * len(hit) ** 0.5, rel=1e-12)


def test_train_text_says_the_hits_and_the_bound(noclip):
    """`phy802 train`'s text carries the count and the bound of its JSON (and says when there is no bound)."""
    from phy802.cli.train import _noise_lines

    _clean, noisy = noclip
    (line,) = _noise_lines(noisy)
    assert f"gradient elements hit {noisy['grad_elements_hit']:,} (counted as distinct elements" in line
    assert f"bound lr x sqrt(hits) {noisy['noise_bound']:.3g}" in line
    sgd = dict(noisy, noise_bound=None, grad_hits_counted="flips")
    assert "an upper bound" in _noise_lines(sgd)[0] and "no weight-noise bound: an SGD step" in _noise_lines(sgd)[0]
    assert _noise_lines({}) == []


def test_the_noise_bound_from_a_hand_made_log():
    import numpy as np

    from integration.replay import InjectionLog
    from integration.train import _grad_hits, noise_bound

    log = InjectionLog()

    def msg(seq, cls, elems, hop=0):
        e = np.array(elems, np.int64)
        log.add(seq=seq, op="allreduce", cls=cls, src=1, dst=0, hop=hop, element=e, bit=np.arange(len(e)),
                old=np.zeros(len(e)), new=np.ones(len(e)), msg_bit=32 * e)

    msg(1, "gradients", [3, 3, 7])  # two bits of element 3: one element
    msg(1, "gradients", [3], hop=1)  # the same element in another message (hop): counted again
    msg(2, "activations", [1, 2])  # not a gradient
    msg(3, "tied_grads", [0])
    assert log.elements_hit(("gradients", "tied_grads")) == 4 and log.elements_hit(("activations",)) == 2
    cfg = TrainConfig(lr=2e-3)
    parts = [{"grad_hits": log.elements_hit(("gradients", "tied_grads")), "log_dropped": 0},
             {"grad_hits": 5, "log_dropped": 0}]
    merged = {"errors_injected": {"gradients": 11, "tied_grads": 2, "activations": 40}}
    assert _grad_hits(merged, parts, cfg) == {"grad_elements_hit": 9, "grad_hits_counted": "elements",
                                              "noise_bound": pytest.approx(2e-3 * 3)}
    parts[1]["log_dropped"] = 1  # a log past its limit: the flips on the gradient classes instead
    assert _grad_hits(merged, parts, cfg) == {"grad_elements_hit": 13, "grad_hits_counted": "flips",
                                              "noise_bound": pytest.approx(2e-3 * 13 ** 0.5)}
    assert noise_bound(dataclasses.replace(cfg, optimizer="sgd"), 9) is None  # SGD's step has no such bound
    assert noise_bound(cfg, 0) == 0.0


def test_one_adamw_step_moves_an_element_at_most_the_step_factor_in_learning_rates():
    """torch's AdamW against :func:`adam_step_factor`: a spike of 1e35 moves its element by less than
    one lr; the Cauchy-Schwarz worst case (gradients growing as (beta2/beta1)^s) reaches the factor."""
    import torch

    from integration.train import adam_step_factor

    b1, b2 = 0.9, 0.95
    k = adam_step_factor(b1, b2)
    assert k == pytest.approx(1.16496, abs=1e-5)

    def steps(grads):
        p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
        opt = torch.optim.AdamW([p], lr=1.0, betas=(b1, b2), eps=0.0, weight_decay=0.0)
        moves = []
        for g in grads:
            before = float(p.detach())
            p.grad = torch.tensor([g], dtype=torch.float64)
            opt.step()
            moves.append(abs(float(p.detach()) - before))
        return moves

    spike = steps([1e-3] * 50 + [1e35] + [1e-3] * 50)
    assert max(spike) <= k and spike[50] < 1.0
    worst = steps([(b2 / b1) ** s for s in range(400)])
    assert max(worst) <= k * (1 + 1e-12) and worst[-1] == pytest.approx(k, rel=1e-6)


def test_the_experiment_row_sets_the_distance_against_the_bound():
    """``noise_bound_ratio`` = ||w - w_shadow|| / (lr sqrt(elements hit)); NaN where no bound applies
    (SGD, whose frozen count is None too: the table takes it as NaN, not a crash)."""
    import math

    import torch

    from integration.experiment import _row, aggregate

    def result(hits, bound, frozen, loss):
        return {"metrics": {}, "final_val_loss": loss, "final_divergence": 0.0, "nonfinite_steps": 0,
                "overflow_steps": 0, "skipped_steps": 0, "step_time_ms": 1.0, "evals": [[0, loss]], "train_loss": [loss],
                "first_nonfinite_loss_step": None, "source_kind": "independent", "frozen_weights": frozen,
                "grad_elements_hit": hits, "grad_hits_counted": "elements", "noise_bound": bound}

    shadow_w, w = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64), torch.tensor([3.0, 4.0, 0.5], dtype=torch.float64)
    shadow = result(0, 0.0, 0, 2.0)
    rows = [_row("ddp", 0.0, "none", 1, shadow, shadow, shadow_w, shadow_w),
            _row("ddp", 1e-4, "none", 1, result(25, 1e-3 * 5, 3, 2.1), shadow, shadow_w, w, 1),
            _row("ddp", 1e-3, "none", 1, result(25, None, None, 2.2), shadow, shadow_w, w, 1)]
    assert math.isnan(rows[0]["noise_bound_ratio"]) and rows[0]["grad_elements_hit"] == 0
    assert rows[1]["noise_bound_ratio"] == pytest.approx(0.5 / 5e-3) and rows[1]["weight_dist_shadow"] == 0.1
    assert math.isnan(rows[2]["noise_bound_ratio"]) and math.isnan(rows[2]["noise_bound"])
    cells = aggregate(rows)
    assert cells[1]["noise_bound_ratio"] == pytest.approx(100.0) and math.isnan(cells[2]["frozen_weights"])


def test_delivered_payload_ber_is_the_sources_within_its_exact_interval(noclip):
    clean, noisy = noclip
    assert clean["ber_delivered"]["flips"] == 0 and clean["ber_delivered"]["why"] is None
    d = noisy["ber_delivered"]
    assert d["given"] == 1e-4 and d["ber_is"] == "payload-stream BER" and d["why"] is None
    assert d["flips"] > 100 and d["value"] == d["flips"] / d["payload_bits"]
    lo, hi = clopper_pearson(d["flips"], d["payload_bits"], 0.999)
    assert lo <= 1e-4 <= hi, (d, lo, hi)


def test_ieee_at_line_ber_1e5_says_it_delivered_no_flip_and_why(capsys):
    rc = main(["train", "--fec", "ieee", "--ber", "1e-5", "--steps", "1", *CLI_TINY])
    assert rc == 0
    out = capsys.readouterr().out
    assert "BER given 1e-05 [pre-FEC line BER]; delivered payload BER 0 (measured: 0 flips" in out
    why = [ln for ln in out.splitlines() if "no flip delivered" in ln]
    assert len(why) == 1 and "--fec ieee corrects up to t=15 symbol errors per RS(544,514)" in why[0]


def test_a_run_too_short_to_expect_a_flip_says_so():
    from integration.train import delivered_ber

    cfg = TrainConfig(replay=ReplayConfig(source=SourceConfig(ber=1e-9, seed=1, kind="independent")))
    d = delivered_ber(cfg, {"payload_bits": {"gradients": 1000}, "stream_bits": {"gradients": 1100}})
    assert d["flips"] == 0 and d["value"] == 0.0
    assert d["why"].startswith("no flip delivered: 1.1e+03 stream bits at BER 1e-09 expect 1.1e-06 flips")


# --- campaigns: every finished run kept, an interrupted campaign resumed, another's runs refused

EXP = ["experiment", "--bers", "1e-4", "--guards", "none", "--parallel", "ddp", "--fec", "bypass", "--source",
       "independent", "--steps", "2", "--no-progress", *CLI_TINY]


def _spec(steps: int = 2):
    from integration.experiment import ExperimentSpec

    base = TrainConfig(parallel="ddp", world_size=2, **{**TINY, "steps": steps})
    return ExperimentSpec(base=base, bers=(1e-4,), parallel=("ddp",), guards=("none",))


def _store(runs, name, cfg):
    (runs / name).mkdir(parents=True)
    (runs / name / "result.json").write_text(json.dumps({"config": cfg.to_dict()}))


def test_a_campaigns_own_finished_runs_are_kept_and_anothers_refused_naming_the_file(tmp_path):
    from integration.experiment import ForeignRuns, campaign_runs, run_name

    spec, runs = _spec(), tmp_path / "runs"
    shadow = run_name("ddp", 1, 0.0, "none", None)
    _store(runs, shadow, spec.config("ddp", 0.0, "none", 1))
    (runs / run_name("ddp", 1, 1e-4, "none", 1)).mkdir()  # interrupted before its result.json: run again
    want, done = campaign_runs(spec, str(runs))
    assert len(want) == 2 and done == {shadow}
    with pytest.raises(ForeignRuns, match=f"{runs / shadow / 'result.json'}: a run of another campaign"):
        campaign_runs(_spec(steps=3), str(runs))  # the same run name, another configuration
    _store(runs, "pp-seed1-ber0-none", spec.config("ddp", 0.0, "none", 1))
    with pytest.raises(ForeignRuns, match="pp-seed1-ber0-none"):  # a run this campaign does not have
        campaign_runs(spec, str(runs))


@pytest.mark.slow
def test_an_interrupted_campaign_resumes_where_it_stopped(tmp_path, monkeypatch, capsys):
    """Ctrl-C after the first run: that run is in the output folder; the resumed campaign runs only
    the other one and writes the table; a campaign of other options on that folder: exit 2."""
    import integration.experiment as experiment

    real = experiment.run_many
    out = tmp_path / "exp"

    def first_then_ctrl_c(cfgs, **kw):
        real(cfgs[:1], **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "run_many", first_then_ctrl_c)
    assert main([*EXP, "--out", str(out)]) == 130
    assert f"interrupted; 1 finished run(s) kept in {out / 'runs'}: the same command resumes there" \
        in capsys.readouterr().err
    assert [p.name for p in (out / "runs").iterdir()] == ["ddp-seed1-ber0-none"]
    started = []
    monkeypatch.setattr(experiment, "run_many", lambda cfgs, **kw: started.append(len(cfgs)) or real(cfgs, **kw))
    assert main([*EXP, "--out", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    assert started == [1] and "2 training runs, 1 kept from before" in cap.err and "estimated about" in cap.err
    rows = json.loads(cap.out)["rows"]
    assert [r["ber"] for r in rows] == [0.0, 1e-4] and rows[1]["flips"] > 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["ddp-seed1-ber0-none", "ddp-seed1-ber0.0001-none-link1"]
    assert main([*EXP[:-len(CLI_TINY)], "--steps", "3", *CLI_TINY, "--out", str(out)]) == 2
    assert "ddp-seed1-ber0-none/result.json: a run of another campaign" in capsys.readouterr().err
    assert started == [1]


# --- the recipe: optimizer, clipping, the paper preset


def _rc(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse usage errors
        return exc.code


@pytest.mark.parametrize("argv,says", [
    (["--fec", "ieee"], "--recipe paper sets --fec bypass, contradicted by --fec ieee"),
    (["--source", "generator"], "--recipe paper sets --source independent, contradicted by --source generator"),
    (["--clip", "wide"], "--recipe paper sets --clip none, contradicted by --clip wide"),
    (["--optimizer", "sgd"], "--recipe paper sets --optimizer adamw, contradicted by --optimizer sgd"),
    (["--grad-clip", "1"], "--recipe paper sets --clip none (no global clipping), contradicted by --grad-clip 1"),
])
def test_a_recipe_contradicted_by_a_flag_exits_2_naming_both(argv, says, capsys):
    assert _rc(["train", "--recipe", "paper", *argv, "--steps", "1", *CLI_TINY]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--recipe", "gpt3"], ["--optimizer", "lion"], ["--clip", "half"]])
def test_unknown_recipe_optimizer_or_clip_exits_2(argv, capsys):
    assert _rc(["train", *argv, "--steps", "1", *CLI_TINY]) == 2
    assert argv[0] in capsys.readouterr().err


@pytest.mark.parametrize("argv,says", [
    (["train", "--update-bound", "2"], "--update-bound is used by --optimizer adamw-bounded only, not adamw"),
    (["train", "--recipe", "paper", "--update-bound", "2"], "--update-bound is used by --optimizer adamw-bounded"),
    (["train", "--recipe", "bounded", "--optimizer", "adamw"],
     "--recipe bounded sets --optimizer adamw-bounded, contradicted by --optimizer adamw"),
    (["train", "--parallel", "fsdp", "--comm-dtype", "fp16"], "--comm-dtype fp16 is built for ddp"),
    (["train", "--comm-dtype", "fp8"], "--comm-dtype"),
    (["train", "--optimizer", "adamw-bounded", "--update-bound", "0"], "--update-bound"),
    (["experiment", "--out", "unused", "--bers", "1e-4", "--parallel", "ddp,pp", "--comm-dtype", "bf16"],
     "--comm-dtype bf16 is built for ddp"),
    (["experiment", "--out", "unused", "--bers", "1e-4", "--recipes", "default,paper", "--update-bound", "2"],
     "--update-bound is used by --optimizer adamw-bounded only"),
])
def test_optimizer_and_comm_dtype_options_refused_naming_the_option(argv, says, capsys):
    assert _rc([*argv, "--steps", "1", *CLI_TINY]) == 2
    assert says in capsys.readouterr().err


def test_the_bounded_recipe_and_the_options_reach_the_config():
    import argparse

    from phy802.cli.train import add_arguments, check_args, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--recipe", "bounded", "--update-bound", "0.5", "--comm-dtype", "bf16"])
    check_args(args)
    cfg = config_from_args(args, parallel="ddp", ber=1e-4, guard="none", steps=1)
    assert (cfg.recipe, cfg.optimizer, cfg.update_bound, cfg.clip, cfg.comm_dtype, cfg.replay.source.kind) == \
        ("bounded", "adamw-bounded", 0.5, "none", "bf16", "independent")


def test_the_paper_recipe_sets_its_options_and_says_so():
    import argparse

    from phy802.cli.train import add_arguments, check_args, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--recipe", "paper", "--grad-clip", "0"])
    check_args(args)
    cfg = config_from_args(args, parallel="ddp", ber=1e-4, guard="none", steps=1)
    assert (cfg.recipe, cfg.clip, cfg.optimizer, cfg.replay.source.kind, cfg.replay.source.fec) == \
        ("paper", "none", "adamw", "independent", "bypass")


def test_wide_clipping_holds_a_flipped_exponent_that_overflows_the_fp32_norm():
    import torch

    from integration.train import _clip_global

    def grads():
        p = [torch.nn.Parameter(torch.zeros(4)) for _ in range(2)]
        p[0].grad = torch.tensor([1e-3, 3.4e35, -2e-3, 0.0])  # 1e-3 with its top exponent bit flipped: ~3.4e35
        p[1].grad = torch.tensor([0.5, 0.25, 0.0, 1e-3])
        return p

    g = grads()
    norm, finite = _clip_global(g, 1.0, None, across=False)
    assert norm == float("inf") and finite and torch.count_nonzero(g[1].grad) == 0  # the whole step zeroed
    w = grads()
    norm, finite = _clip_global(w, 1.0, None, across=False, wide=True)
    assert norm == pytest.approx(3.4e35, rel=1e-6) and finite
    assert float(w[0].grad[1]) == pytest.approx(1.0, rel=1e-5) and float(w[1].grad[0]) > 0  # scaled, not zeroed


def test_sgd_has_momentum_and_no_frozen_count():
    import torch

    from integration.train import SGD_MOMENTUM, _frozen, _optimizer

    cfg = TrainConfig(optimizer="sgd")
    opt = _optimizer(cfg, [torch.nn.Parameter(torch.zeros(2, 2))])
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == SGD_MOMENTUM
    assert _frozen([{"frozen_steps": []}], cfg)["frozen_weights"] is None
    with pytest.raises(ValueError, match="clip 'wide'"):
        TrainConfig(parallel="fsdp", clip="wide")


# --- the recipe as an axis of the experiment


def test_experiment_recipes_each_have_their_settings_their_shadow_and_their_run_names():
    from integration.experiment import ExperimentSpec, campaign_runs
    from integration.train import with_recipe

    base = TrainConfig(parallel="ddp", world_size=2, **TINY)
    spec = ExperimentSpec(base=base, bers=(1e-4,), parallel=("ddp",), guards=("none",), recipes=("default", "paper"))
    want = campaign_runs(spec, "/nonexistent")[0]
    assert sorted(want) == ["ddp-paper-seed1-ber0-none", "ddp-paper-seed1-ber0.0001-none-link1",
                            "ddp-seed1-ber0-none", "ddp-seed1-ber0.0001-none-link1"]
    paper = want["ddp-paper-seed1-ber0.0001-none-link1"]
    assert (paper.recipe, paper.clip, paper.optimizer, paper.replay.source.kind, paper.replay.source.fec) == \
        ("paper", "none", "adamw", "independent", "bypass")
    assert want["ddp-paper-seed1-ber0-none"].clip == "none"  # its own shadow: trained without clipping too
    default = want["ddp-seed1-ber0.0001-none-link1"]
    assert (default.recipe, default.clip, default.replay.source.kind) == ("default", "global", "generator")
    assert with_recipe(base, "default") == base
    with pytest.raises(ValueError, match="recipes"):
        ExperimentSpec(base=base, recipes=("paper", "gpt3"))


@pytest.mark.parametrize("argv,says", [
    (["--recipes", "default,paper", "--fec", "ieee"], "--recipes paper sets --fec bypass, contradicted by --fec ieee"),
    (["--recipes", "paper", "--clip", "global"], "--recipes paper sets --clip none, contradicted by --clip global"),
    (["--recipes", "default,paper", "--grad-clip", "0.5"],
     "--recipes paper sets --clip none (no global clipping), contradicted by --grad-clip 0.5"),
    (["--recipes", "default,gpt3"], "--recipes"),
    (["--recipe", "paper", "--optimizer", "sgd"], "--recipes paper sets --optimizer adamw"),  # one option, two names
])
def test_experiment_recipe_contradicted_or_unknown_exits_2_naming_the_option(argv, says, tmp_path, capsys):
    assert _rc(["experiment", "--out", str(tmp_path / "x"), *argv, "--steps", "1", *CLI_TINY]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # refused before the output set or any run


@pytest.mark.slow
def test_experiment_prints_the_tolerance_table_per_recipe_and_draws_it(tmp_path, capsys):
    out = tmp_path / "exp"
    argv = ["experiment", "--out", str(out), "--recipes", "default,paper", "--source", "independent", "--fec", "bypass", "--bers",
            "1e-4", "--guards", "none", "--parallel", "ddp", "--steps", "2", "--no-progress", "--epsilon", "0.5",
            *CLI_TINY]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["recipe"], r["ber"]) for r in doc["rows"]] == [("default", 0.0), ("default", 1e-4), ("paper", 0.0),
                                                              ("paper", 1e-4)]
    tol = doc["tolerance"]
    assert [(t["parallel"], t["recipe"], t["guard"], t["epsilon"]) for t in tol] == \
        [("ddp", "default", "none", 0.5), ("ddp", "paper", "none", 0.5)]
    # 2 steps move the loss far less than 0.5 nats: 1e-4 passes, and the payload BER delivered there is measured
    assert all(t["ber_is"] == "payload-stream BER" and t["passes"] == 1e-4 and t["delivered_passes"] > 0 for t in tol)
    saved = json.loads((out / "results.json").read_text())
    assert saved["tolerance"][1]["threshold"] == tol[1]["threshold"]
    assert "Tolerated BER" in (out / "table.md").read_text()
    for name in ("tolerance.png", "loss_ddp_default.png", "loss_ddp_paper.png"):
        assert (out / name).stat().st_size > 0


def test_the_run_count_is_every_run_the_campaign_has():
    from integration.experiment import ExperimentSpec, campaign_runs

    base = TrainConfig(parallel="ddp", world_size=2, **TINY)
    spec = ExperimentSpec(base=base, bers=(1e-5, 1e-4), parallel=("ddp", "pp"), guards=("none", "nan_to_zero_clamp"),
                          seeds=(1, 2), link_seeds=(3, 4, 5), recipes=("default", "paper"))
    assert spec.n_runs() == len(campaign_runs(spec, "/nonexistent")[0]) == 2 * 2 * 2 * (1 + 2 * 2 * 3)
