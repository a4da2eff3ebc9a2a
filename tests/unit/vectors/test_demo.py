"""`phy802 demo` (the README's third command) end to end, without torch in the default run."""

import json

import pytest

from phy802.cli import main


def test_demo_quick_without_training(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--quick", "--no-train", "--workers", "1", "--no-progress", "--json", "--out", str(out)])
    assert rc == 0
    s = json.loads(capsys.readouterr().out)
    assert s["vectors"]["failed"] == 0 and s["vectors"]["passed"] >= 16
    for name in ("report.md", "summary.json", "ber_fer.png", "latency.png", "trace_bypass_400g.trace"):
        assert (out / name).stat().st_size > 0, name
    rows = {(r["mode"], r["x"]): r for r in s["sweep"]}
    # bypass delivers the channel's errors: its post-FEC BER interval holds the pre-FEC BER it was set to
    assert {m for m, _ in rows} == {"kp4/ieee", "kp4/bypass"}
    for (mode, x), r in rows.items():
        if mode == "kp4/bypass":
            assert r["post_fec_ber_lo"] <= x <= r["post_fec_ber_hi"]
    # KP4 at 3e-4 (theory FER ~1e-11) shows no failures, at 3e-3 most codewords fail
    assert rows[("kp4/ieee", 3e-4)]["codeword_errors"] == 0
    assert rows[("kp4/ieee", 3e-3)]["fer"] > 0.3
    assert {m for m, _ in rows} == {"kp4/ieee", "kp4/bypass"}
    meta = s["trace"]["meta"]
    assert meta["pre_fec"]["bit_errors"] > 0 and meta["fec"] == "bypass"
    report = (out / "report.md").read_text()
    assert "## 1. Known-answer vectors" in report and "## 3. Error trace" in report
    # the report opens with what the run shows, computed from its numbers, and says what is a model
    head = report.split("## 1. Known-answer vectors")[0]
    assert "## What this run shows" in head and f"All {s['vectors']['passed']} known-answer" in head
    assert f"0 of {rows[('kp4/ieee', 3e-4)]['codewords']:,}" in head and "**Measured or model.**" in head
    # it leads with its answer: the verdict of `phy802 advise` on the files the demo wrote (the trace's FEC
    # histogram, the cluster of section 5), the very line the command prints on them, then the evidence
    lines = report.splitlines()
    assert lines[0] == "# phy802 demo report" and lines[2].startswith("**Verdict:** ")
    sentence = lines[2][len("**Verdict:** "):]
    assert sentence == s["advise"]["verdict"]["sentence"] and "[model]" in sentence
    argv = s["advise"]["argv"]
    assert argv[:2] == ["phy802", "advise"] and argv[argv.index("--fec-hist") + 1] == str(out / "fec_hist.json")
    assert main(argv[1:]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"VERDICT: {sentence}"
    assert json.loads((out / "advise.json").read_text())["verdict"] == s["advise"]["verdict"]
    assert report.index("## The answer") < report.index("## What this run shows")
    assert "| trace_bypass_400g | kp4/bypass | no | frame header loss" in report


@pytest.mark.slow
def test_demo_quick_with_training(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--no-progress", "--json", "--out", str(out)]) == 0
    s = json.loads(capsys.readouterr().out)
    shadow, noisy = s["training"][0], s["training"][1]
    assert shadow["ber"] == 0 and shadow["flips"] == 0
    assert shadow["injected_noise"] == 0 and shadow["weight_dist_shadow"] == 0
    # what the link injected into the received payload, and where the weights ended up
    assert noisy["flips"] > 0 and noisy["injected_noise"] > 0 and noisy["weight_dist_shadow"] > 0
    assert (out / "training" / "loss_ddp.png").stat().st_size > 0
    # which recipe, which BER kind, the payload BER delivered (measured): in the report, from the summary
    from phy802.cli._narrative import ber_kind_sentence, recipe_sentence

    [rec] = s["training_recipes"]
    assert (rec["recipe"], rec["clip"], rec["source"], rec["fec"]) == ("default", "global", "trace", "bypass")
    assert noisy["recipe"] == "default" and noisy["ber_is"] == "trace (line BER of its header)"
    assert 0 < noisy["ber_delivered"]
    report_text = (out / "report.md").read_text()
    assert f"- {recipe_sentence(rec)}" in report_text and recipe_sentence(rec) + "\n" in report_text
    assert f"- Guard `{noisy['guard']}`, recipe `default`: {ber_kind_sentence(noisy)}." in report_text
    # step 5: the tradeoff of those runs (modelled step time x measured loss), table and Pareto plot
    assert s["tradeoff"]["rows"] > 0 and (out / "tradeoff" / "pareto.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "## 5. Is skipping FEC worth it?" in report
    # measured vs model said in the columns themselves; PHY (us) explained with the run's numbers
    assert "step_ms (measured: CPU wall time here)" in report and "| step (ms, model) |" in report
    assert "`PHY (us)` is the FEC receive latency summed over every sequential link hop" in report
    from phy802.cli.tradeoff import LOSS_PENALTY_MEANING  # a loss penalty is a difference of two measured runs

    assert "\n" + LOSS_PENALTY_MEANING + ".\n" in report
    # every mode of the table at BER 0 either has its trace-BER row or a stated reason
    rows = s["tradeoff"]["rows_64_ranks"]
    missing = {(m["mode"], m["ber"]) for m in s["tradeoff"]["missing_64_ranks"]}
    for mode in {r["mode"] for r in rows}:
        assert any(r["mode"] == mode and r["ber"] > 0 for r in rows) or any(m == mode for m, _ in missing), mode
    for m in s["tradeoff"]["missing_64_ranks"]:
        assert f"No **{m['mode']}** row at BER {m['ber']:g}: " in report
    # the verdict reads the training's loss side too, and advise on the demo's files says the same
    argv = s["advise"]["argv"]
    assert argv[argv.index("--results") + 1] == str(out / "training")
    assert main(argv[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["sentence"] == s["advise"]["verdict"]["sentence"]
    assert report.splitlines()[2] == f"**Verdict:** {s['advise']['verdict']['sentence']}"


@pytest.mark.slow  # two advise runs with the 64-GPU cluster model: ~40 s on 2 loaded vCPUs
def test_demo_verdict_follows_its_link(tmp_path, capsys):
    """The demo's answer step on its link's histogram at pre-FEC BER 1e-5 (RS(272) keeps the target FER: the
    link could run it) and at 1e-4 (RS(272) misses it: no faster mode passes) gives two different verdicts,
    each the line `phy802 advise` prints on the file the step wrote (histograms sampled with a fixed seed)."""
    import numpy as np

    from phy802 import theory
    from phy802.cli.demo import ADVISE_PORT, DemoConfig, _advise_step
    from phy802.telemetry.fit import sample_histogram

    said = {}
    for ber in (1e-5, 1e-4):
        d = tmp_path / f"ber{ber:g}"
        d.mkdir()
        h = sample_histogram("binomial", {"p_symbol": float(theory.symbol_error_prob(ber))}, "kp4", 200_000,
                             np.random.default_rng(7))
        assert h.uncorrectable == 0
        summary = {"trace": {"meta": {"codewords": {"symbol_error_hist": [b.count for b in h.bins]}}}, "steps": {}}
        md = _advise_step(DemoConfig(out=str(d), train=False, trace_ber=ber, progress=False), d, d, summary)
        v = summary["advise"]["verdict"]
        assert main(summary["advise"]["argv"][1:]) == 0
        assert capsys.readouterr().out.splitlines()[0] == f"VERDICT: {v['sentence']}"
        assert f"at BER {ber:g}, measured" in md[2]
        said[ber] = (v["sentence"], v["ports"])
    assert said[1e-5][1] == [{"port": ADVISE_PORT, "mode": "rs272/ieee"}]
    assert said[1e-4][1] == [{"port": ADVISE_PORT, "mode": "kp4/ieee"}]
    assert "(1 of 1 links could run a faster mode" in said[1e-5][0]
    assert "(no link passes the checks for a faster mode)" in said[1e-4][0]


# --- the report says what its numbers are, on synthetic rows: no training needed ---------

def _t(mode, ber, guard, vs_ref, **kw):
    return {"mode": mode, "ber": ber, "guard": guard, "vs_ref": vs_ref, "step_ms": 30.0, "phy_us": 0.0, **kw}


def test_ties_are_reported_as_ties():
    from phy802.cli._narrative import _tradeoff_sentences, fastest

    rows = [_t("kp4/ieee", 0.0, "-", 1.0), _t("rs272/ieee", 1e-5, "-", 0.99601), _t("rs272/llr", 1e-5, "-", 0.99599),
            _t("kp4/ieee", 1e-5, "-", 1.0)]
    assert [r["mode"] for r in fastest(rows[1:])] == ["rs272/ieee", "rs272/llr"]
    text = _tradeoff_sentences(rows)[0]
    assert "**rs272/ieee** and **rs272/llr** (tied), 0.996x" in text
    assert "error-free: **kp4/ieee**, 1.000x" in text  # one winner stays one winner


def test_missing_rows_get_a_reason():
    from phy802.cli.demo import missing_settings

    rows = [_t("kp4/ieee", 0.0, "-", 1.0), _t("kp4/ieee", 1e-5, "-", 1.0), _t("kp4/unequal", 0.0, "-", 0.99)]
    miss = missing_settings(rows, (0.0, 1e-5), trained_guards=("none", "nan_to_zero_clamp"))
    assert [(m["mode"], m["ber"]) for m in miss] == [("kp4/unequal", 1e-5)]
    assert "exponent_protection" in miss[0]["reason"] and "`nan_to_zero_clamp`" in miss[0]["reason"]


def test_phy_us_and_overflow_steps_are_explained_with_the_runs_numbers():
    from phy802.cli.demo import _measured_step_header, _training_notes
    from phy802.cli.demo import _tradeoff_notes as _trade_notes_for_test

    notes = _trade_notes_for_test([_t("kp4/ieee", 0.0, "-", 1.0, phy_us=305.0)], {"kp4/ieee": 57.6}, [])
    assert "305 us = 57.6 ns x 5,295 sequential link hops" in notes[0]
    tr = _training_notes([{"guard": "none", "ber": 1e-5, "overflow_steps": 300.0, "final_val_loss": 4.228},
                          {"guard": "nan_to_zero_clamp", "ber": 1e-5, "overflow_steps": 0}], 300)
    assert "`step_ms` is **measured**" in tr[1]
    assert [t for t in tr if t.startswith("Here")] == [
        "Here guard `none` at BER 1e-05 has `overflow_steps = 300` of 300 steps: every update was zeroed, so the "
        "model never learned (final loss 4.23)."]
    head = _measured_step_header("| a | step_ms |\n|---|---|\n| 1 | 2 |")
    assert head.splitlines()[0] == "| a | step_ms (measured: CPU wall time here) |"


def _row(ber, guard, **kw):
    return {"parallel": "ddp", "recipe": "default", "ber": ber, "guard": guard, "seeds": 1, "final_val_loss": 2.7,
            "delta_val_loss": 0.0, "ber_is": "error-free" if ber == 0 else "trace (line BER of its header)",
            "ber_delivered": 0.0, **kw}


_DEFAULT = {"recipe": "default", "about": "the options as given", "inferred": False, "optimizer": "adamw",
            "clip": "global", "grad_clip": 1.0, "source": "trace", "fec": "bypass"}


def test_training_says_its_recipe_from_the_summary():
    """The recipe sentence is the summary's ``training_recipes`` entry: name, its help, the settings it
    gave the runs (optimizer, clipping), the error source; ``paper`` is marked inferred."""
    from phy802.cli._narrative import narrative, recipe_sentence

    s = recipe_sentence(_DEFAULT)
    assert s.startswith("Recipe `default` (the options as given): here optimizer adamw, global gradient-norm "
                        "clipping at 1 with an fp32 norm") and "source `trace` with `--fec bypass`" in s
    assert "inferred" not in s
    assert "clipping at 0.5 " in recipe_sentence({**_DEFAULT, "grad_clip": 0.5})
    assert "no global gradient-norm clipping" in recipe_sentence({**_DEFAULT, "clip": "none"})
    assert "no global gradient-norm clipping" in recipe_sentence({**_DEFAULT, "grad_clip": 0.0})
    assert "summed in float64" in recipe_sentence({**_DEFAULT, "clip": "wide"})
    assert "optimizer sgd" in recipe_sentence({**_DEFAULT, "optimizer": "sgd"})
    paper = recipe_sentence({**_DEFAULT, "recipe": "paper", "inferred": True, "clip": "none", "source": "independent"})
    assert paper.startswith("Recipe `paper` -- **inferred** from the study, not quoted (")
    assert "source `independent`" in paper
    rows = [_row(0.0, "-"), _row(1e-5, "none", ber_delivered=3.1e-5, delta_val_loss=1.5, final_val_loss=4.2)]
    lines = narrative({"training": rows, "training_recipes": [_DEFAULT]})
    assert f"- {s}" in lines
    assert not any("Recipe `" in line for line in narrative({"training": rows}))


def test_training_says_which_ber_and_what_it_delivered():
    """Each row with errors: the BER given with its kind (``ber_is``, a setting) and the payload BER it
    delivered (``ber_delivered``, measured); the losses measured, over how many seeds; one shadow per recipe."""
    from phy802.cli._narrative import _training_sentences, ber_kind_sentence
    from phy802.cli.demo import _ber_kind_notes

    r = _row(1e-5, "none", ber_delivered=3.1e-5, delta_val_loss=1.5, final_val_loss=4.2)
    assert ber_kind_sentence(r).startswith("BER 1e-5 given, of kind trace (line BER of its header) (a setting); "
                                           "delivered payload BER 3.1e-5 (measured")
    assert "of kind payload-stream BER" in ber_kind_sentence({**r, "ber_is": "payload-stream BER"})
    assert "delivered payload BER 2.9e-5 (measured" in ber_kind_sentence({**r, "ber_delivered": 2.9e-5})
    assert "delivered payload BER not recorded" in ber_kind_sentence({**r, "ber_delivered": float("nan")})
    text = _training_sentences([_row(0.0, "-"), r])[0]
    assert text.startswith("DDP training, recipe `default`: the error-free run ended at validation loss 2.7; "
                           f"guard `none` at {ber_kind_sentence(r)}: loss 4.2, lost 1.500")
    assert text.endswith("(losses measured, one seed: indicative; no number of the training is a model or a prediction).")
    assert "mean of 3 seeds" in _training_sentences([_row(0.0, "-", seeds=3), {**r, "seeds": 3}])[0]
    # two recipes: each compared with its own error-free run
    p = {**r, "recipe": "paper", "final_val_loss": 2.71, "delta_val_loss": 0.01}
    two = _training_sentences([_row(0.0, "-"), r, _row(0.0, "-", recipe="paper"), p])
    assert [t.split(":")[0] for t in two] == ["DDP training, recipe `default`", "DDP training, recipe `paper`"]
    assert "stayed close to error-free (+0.010)" in two[1]
    notes = _ber_kind_notes([_row(0.0, "-"), r])
    assert notes[0] == f"- Guard `none`, recipe `default`: {ber_kind_sentence(r)}."
    assert notes[-1].startswith("Every column of the table below is measured on this run except `parallel`, `ber`, "
                                "`ber_is`, `guard`, `seeds`, `recipe`, `optimizer`, `comm_dtype` (the settings)")


def test_training_recipes_are_the_configs_the_sweep_runs():
    """``training_recipes`` reads the settings from the sweep's own run configs: the paper recipe turns
    clipping off and its source to payload-stream flips; every setting column named is a table column."""
    pytest.importorskip("torch")
    import argparse

    from integration.experiment import COLUMNS
    from phy802.cli.demo import _SETTINGS, training_recipes
    from phy802.cli.experiment import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    common = ["--out", "unused", "--bers", "1e-5", "--parallel", "ddp", "--guards", "none", "--fec", "bypass"]
    [default] = training_recipes(p.parse_args(common + ["--source", "generator", "--grad-clip", "0.5"]), 1e-5)
    assert {k: default[k] for k in ("recipe", "inferred", "optimizer", "clip", "grad_clip", "source", "fec")} == {
        "recipe": "default", "inferred": False, "optimizer": "adamw", "clip": "global", "grad_clip": 0.5,
        "source": "generator", "fec": "bypass"}
    default2, paper = training_recipes(p.parse_args(common + ["--source", "independent", "--recipes", "default,paper"]),
                                       1e-5)
    assert (default2["recipe"], default2["clip"]) == ("default", "global")
    assert (paper["recipe"], paper["inferred"], paper["clip"], paper["optimizer"]) == ("paper", True, "none", "adamw")
    assert "not quoted" in paper["about"]
    assert set(_SETTINGS) <= set(COLUMNS)
