"""``phy802 demo``: the main job, the whole story on its defaults in a few minutes.

1. verify every known-answer vector in ``vectors/`` (RS, PCS, PMA);
2. sweep pre-FEC BER for KP4 vs bypass (codeword-level simulator, 95% intervals) with the added
   receive latency each mode costs (protocol layer);
3. write an error trace of the 400G link in bypass mode;
4. train a small GPT with 2-rank DDP, error-free and with that trace's errors replayed into the
   gradient all-reduce (without a guard, and with the NaN->0 + clamp guard);
5. join the training's loss side with the modelled step time per FEC mode (``phy802 tradeoff``:
   time to target loss at 8, 64 and 512 ranks of GPT-2 small, Pareto plot);
6. answer the question with ``phy802 advise`` on the run's own inputs: the trace's FEC histogram
   (``fec_hist.json``), the cluster and workload of step 5 and the loss side of step 4;
7. write ``report.md`` -- the verdict first, in ``advise``'s own sentence, then the tables that
   support it -- and the plots into ``--out``.

This module is a command-line face: it imports :mod:`protocol` and :mod:`integration` lazily, so
``phy802`` itself never needs torch.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from phy802.cli._common import add_json, add_seed, emit, int_arg
from phy802.runtime.output import atomic_write_text

__all__ = ["DemoConfig", "run_demo", "add_arguments", "run", "advise_argv", "write_fec_hist", "REPORT_RANKS",
           "ADVISE_PORT"]

#: the cluster size the report's answer and its section 5 are at (step 5 models 8, 64 and 512 ranks)
REPORT_RANKS = 64
#: GPUs per node of the cluster the demo models (``--cluster dgx-h100-ib``: one DGX H100 node is 8 GPUs)
_GPUS_PER_NODE = 8
#: the traced link: its trace file's stem and its port name in ``fec_hist.json``
ADVISE_PORT = "trace_bypass_400g"


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs; the defaults take a few minutes on a 2-core machine."""

    out: str = "phy802-demo"
    seed: int = 1
    sweep_bers: tuple[float, ...] = (1e-4, 3e-4, 1e-3, 1.5e-3, 2e-3, 3e-3)
    sweep_seconds: float = 4.0
    sweep_target_errors: int = 100
    sweep_max_codewords: int = 2_000_000
    workers: int | None = None
    trace_ber: float = 1e-5
    trace_bits: float = 2e10
    train: bool = True
    train_steps: int = 300
    train_layers: int = 4
    train_embd: int = 128
    train_guards: tuple[str, ...] = ("none", "nan_to_zero_clamp")
    progress: bool = True


def _say(cfg: DemoConfig, text: str) -> None:
    if cfg.progress:
        print(f"[demo] {text}", file=sys.stderr, flush=True)


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def run_demo(cfg: DemoConfig) -> dict:
    """Run every step; returns a summary dict (also written as ``summary.json``)."""
    from phy802.runtime.output import check_output_dir, output_set

    check_output_dir(cfg.out, "demo")  # before any work: never over the user's files
    with output_set(cfg.out, "demo") as stage:  # built beside --out, swapped in whole
        return _demo_into(cfg, Path(stage), Path(cfg.out))


def _vectors_step(cfg: DemoConfig, summary: dict) -> list[str]:
    """Every known-answer vector verified; returns the report section."""
    from phy802 import vectors

    md: list[str] = []
    t0 = time.perf_counter()
    reports = vectors.verify_paths([vectors.default_dir()])
    n_ok = sum(r.ok for r in reports)
    summary["vectors"] = {"passed": n_ok, "failed": len(reports) - n_ok, "files": [r.as_dict() for r in reports]}
    summary["steps"]["vectors_s"] = time.perf_counter() - t0
    _say(cfg, f"vectors: {n_ok} passed, {len(reports) - n_ok} failed")
    md += ["## 1. Known-answer vectors", "", "| file | block | records | result |", "|---|---|---|---|"]
    base = vectors.default_dir()
    for r in reports:
        name = os.path.relpath(r.path, base.parent) if r.path.startswith(str(base)) else r.path
        md.append(f"| `{name}` | {r.family} | {r.n_records} | {'pass' if r.ok else 'FAIL: ' + (r.error or r.failures[0])} |")
    md += ["", f"**{n_ok} passed, {len(reports) - n_ok} failed.**", ""]
    return md


def _sweep_step(cfg: DemoConfig, out: Path, summary: dict) -> list[str]:
    """Pre- vs post-FEC BER for KP4 and bypass, with the latency each costs; returns the report section."""
    from phy802.plots import plot_ber_fer, plot_latency
    from phy802.sweep import SweepConfig, run_sweep
    from phy802.cli.sweep import latency_function

    md: list[str] = []
    t0 = time.perf_counter()
    sc = SweepConfig(points=cfg.sweep_bers, axis="ber", code=("kp4",), fec=("ieee", "bypass"), rate="400G",
                     target_errors=cfg.sweep_target_errors, max_codewords=cfg.sweep_max_codewords,
                     max_seconds=cfg.sweep_seconds, seed=cfg.seed)
    _say(cfg, f"sweep: {len(sc.tasks())} points (KP4 vs bypass), up to {cfg.sweep_seconds:g} s each")
    from phy802.runtime.progress import progress

    with progress(total=len(sc.tasks()), desc="demo sweep: points", unit="point", enable=cfg.progress) as bar:
        res = run_sweep(sc, executor="process" if (cfg.workers or os.cpu_count() or 1) > 1 else None,
                        workers=cfg.workers, callback=lambda p: bar.update(1))
    lat = latency_function("400G")
    plot_ber_fer(res, out / "ber_fer.png")
    if lat is not None:
        plot_latency(res, lat, out / "latency.png")
    summary["sweep"] = res.rows()
    summary["latency_ns"] = {m: lat(m) for m in sc.modes} if lat is not None else {}
    summary["steps"]["sweep_s"] = time.perf_counter() - t0
    md += ["## 2. Pre-FEC vs post-FEC BER, KP4 vs bypass, and the latency each costs", "",
           "400GBASE-R, PAM4 AWGN set by pre-FEC BER, codeword-level error-pattern simulator.", "",
           "| mode | added latency, ns (model) | pre-FEC BER (measured) | codewords | FER [95% CI] (measured) "
           "| post-FEC BER at the decoder output [95% CI] (measured) | payload BER after the descrambler (model: 3x) "
           "| theory post-FEC BER (model) |",
           "|---|---|---|---|---|---|---|---|"]
    for p in res.points:
        r = p.rates()
        th = p.theory()["post_fec_ber"]
        latency = _fmt(lat(p.mode)) if lat else "-"
        pay, _, pay_hi, _ = p.payload_ber()
        pay_txt = f"< {_fmt(pay_hi)}" if r["post_fec_ber"].events == 0 else _fmt(pay)
        md.append(f"| {p.mode} | {latency} | {_fmt(r['pre_fec_ber'].value)} | {p.counters.codewords} | {_ci(r['fer'])} "
                  f"| {_ci(r['post_fec_ber'])} | {pay_txt} | {_fmt(th)} |")
    md += ["", "![BER and FER](ber_fer.png)", ""]
    if lat is not None:
        md += ["![latency vs post-FEC BER](latency.png)", ""]
    _say(cfg, f"sweep done in {summary['steps']['sweep_s']:.1f} s")
    return md


def _trace_step(cfg: DemoConfig, out: Path, shown: Path, summary: dict) -> tuple[list[str], Path]:
    """An error trace of the bypass mode; returns the report section and the trace's path."""
    md: list[str] = []
    t0 = time.perf_counter()
    from protocol.trace import generate_trace

    trace_path = out / f"{ADVISE_PORT}.trace"
    meta = generate_trace(trace_path, rate="400G", fec="bypass", ber=cfg.trace_ber, line_bits=cfg.trace_bits,
                          seed=cfg.seed, progress=cfg.progress)
    summary["trace"] = {"path": str(shown / trace_path.name), "meta": meta}
    summary["steps"]["trace_s"] = time.perf_counter() - t0
    _say(cfg, f"trace: {shown / trace_path.name} in {summary['steps']['trace_s']:.1f} s")
    md += ["## 3. Error trace", "", f"`{trace_path.name}`: 400G, bypass mode, pre-FEC BER {cfg.trace_ber:g}, "
           f"seed {cfg.seed}, written in {summary['steps']['trace_s']:.1f} s. `phy802 trace info {shown / trace_path.name}` "
           "prints all of its metadata.", "", "| field | value |", "|---|---|"]
    for k, v in _flat(meta).items():
        md.append(f"| {k} | {v} |")
    md.append("")
    return md, trace_path


def _training_step(cfg: DemoConfig, out: Path, trace_path: Path, summary: dict) -> list[str]:
    """2-rank DDP training with the trace's errors, error-free shadow beside it; returns the report section."""
    md: list[str] = []
    t0 = time.perf_counter()
    from phy802.cli._narrative import recipe_sentence
    from phy802.cli.experiment import _table_md, add_arguments as exp_args, sweep as exp_sweep, write_report

    p = argparse.ArgumentParser()
    exp_args(p)
    args = p.parse_args([
        "--out", str(out / "training"), "--bers", f"{cfg.trace_ber:g}", "--parallel", "ddp",
        "--guards", ",".join(cfg.train_guards), "--steps", str(cfg.train_steps), "--seed", str(cfg.seed),
        "--source", "trace", "--trace", str(trace_path), "--fec", "bypass", "--n-layer", str(cfg.train_layers),
        "--n-embd", str(cfg.train_embd), "--eval-interval", str(max(1, cfg.train_steps // 6)),
        "--timeout", "1800", *([] if cfg.progress else ["--no-progress"]),
    ])
    summary["training_recipes"] = training_recipes(args, cfg.trace_ber)
    _say(cfg, f"training: 2-rank DDP, {cfg.train_steps} steps, error-free + guards {', '.join(cfg.train_guards)}")
    rows = exp_sweep(args, prog="phy802 demo")
    write_report(rows, str(out / "training"), {k: v for k, v in vars(args).items()})
    summary["training"] = [{k: v for k, v in r.items() if k not in ("evals", "train_loss", "metrics")} for r in rows]
    summary["steps"]["training_s"] = time.perf_counter() - t0
    _say(cfg, f"training done in {summary['steps']['training_s']:.1f} s")
    md += ["## 4. 2-rank DDP training with the trace's errors in the gradient all-reduce", "",
           "A small char-level GPT on the King James Bible. The error-free run is the shadow: every run "
           "with errors uses the same seed, data order and initial weights. `injected_noise` = "
           "||delivered - clean|| / ||clean|| of the received gradients is what the link injected; "
           "`weight_dist_shadow` = ||w - w_shadow|| / ||w_shadow|| also counts the training that went "
           "differently afterwards.", "",
           *[recipe_sentence(r) for r in summary["training_recipes"]], "",
           *_ber_kind_notes(rows), "",
           _measured_step_header(_table_md(rows)), *_training_notes(rows, cfg.train_steps),
           "![loss curves](training/loss_ddp.png)", ""]
    return md


def training_recipes(args: argparse.Namespace, ber: float) -> list[dict]:
    """The settings each recipe of ``phy802 experiment`` options ``args`` gives its runs with errors at
    ``ber`` (the very configs the sweep runs: :meth:`integration.experiment.ExperimentSpec.config`),
    for the report's recipe sentence (:func:`phy802.cli._narrative.recipe_sentence`)."""
    from integration.train import RECIPE_HELP

    from phy802.cli.experiment import spec_from_args

    spec = spec_from_args(args)
    out = []
    for name in spec.recipe_names():
        c = spec.config(spec.parallel[0], ber, spec.guards[0], spec.seeds[0], recipe=name)
        out.append({"recipe": c.recipe, "about": RECIPE_HELP[c.recipe],
                    "inferred": c.recipe == "paper",  # RECIPES: "paper" is our reading of the study, not quoted
                    "optimizer": c.optimizer, "clip": c.clip, "grad_clip": c.grad_clip,
                    "source": c.replay.source.kind, "fec": c.replay.source.fec})
    return out


def _ber_kind_notes(rows: list[dict]) -> list[str]:
    """Per training row with errors: the BER given and its kind, the payload BER delivered (measured)."""
    from phy802.cli._narrative import ber_kind_sentence

    return [f"- Guard `{r['guard']}`, recipe `{r.get('recipe', 'default')}`: {ber_kind_sentence(r)}."
            for r in rows if r["ber"] > 0] + [
        "", f"Every column of the table below is measured on this run except {', '.join(f'`{c}`' for c in _SETTINGS)} "
        "(the settings); none is a model or a prediction (the modelled step times are section 5's)."]


#: the training table's columns that are settings, not measurements (integration.experiment.COLUMNS)
_SETTINGS = ("parallel", "ber", "ber_is", "guard", "seeds", "recipe", "optimizer", "comm_dtype")


def _demo_into(cfg: DemoConfig, out: Path, shown: Path) -> dict:
    """:func:`run_demo`'s steps, writing into ``out`` (the set being built); ``shown`` is where it
    ends up (what the report and summary name)."""
    summary: dict = {"out": str(shown), "seed": cfg.seed, "steps": {}}
    md: list[str] = []
    md += _vectors_step(cfg, summary)
    md += _sweep_step(cfg, out, summary)
    trace_md, trace_path = _trace_step(cfg, out, shown, summary)
    md += trace_md
    if cfg.train:
        md += _training_step(cfg, out, trace_path, summary)
        md += _tradeoff_step(cfg, out, summary)  # the loss side above joined with the modelled time side
    answer_md = _advise_step(cfg, out, shown, summary)  # last: it reads the trace and the training

    md += ["## Reproduce", "", "```", f"phy802 demo --seed {cfg.seed} --out {cfg.out}", "```", ""]
    from phy802.cli._narrative import narrative

    head = ["# phy802 demo report", "", f"**Verdict:** {summary['advise']['verdict']['sentence']}", "",
            f"Seed {cfg.seed}; `summary.json` holds every number of this report.", ""]
    atomic_write_text(out / "report.md", "\n".join(head + answer_md + narrative(summary) + md))
    from phy802.runtime.jsonable import to_jsonable
    import json

    atomic_write_text(out / "summary.json", json.dumps(to_jsonable(summary), indent=1))
    return summary


def _ci(est) -> str:
    """A measured rate with its 95% interval; with no events, the one-sided upper bound."""
    if est.events == 0:
        return f"0 (< {_fmt(est.hi)})"
    return f"{_fmt(est.value)} [{_fmt(est.lo)}, {_fmt(est.hi)}]"


def _tradeoff_step(cfg: DemoConfig, out: Path, summary: dict) -> list[str]:
    """``phy802 tradeoff`` on the training results; returns the report section."""
    from phy802.cli.tradeoff import LOSS_PENALTY_MEANING, add_arguments as t_args, run_tradeoff

    t0 = time.perf_counter()
    p = argparse.ArgumentParser()
    t_args(p)
    targs = p.parse_args(["--results", str(out / "training"), "--out", str(out / "tradeoff"),
                          "--ranks", "8,64,512", "--seed", str(cfg.seed)])
    targs.shown_out = str(Path(cfg.out) / "tradeoff")  # the set is built beside --out
    _say(cfg, "tradeoff: modelled step time per FEC mode x measured loss -> time to target loss")
    doc = run_tradeoff(targs, live=False)
    summary["tradeoff"] = {"out": doc["out"], "rows": len(doc["rows"])}
    summary["steps"]["tradeoff_s"] = time.perf_counter() - t0
    rows = [r for r in doc["rows"] if r["ranks"] == REPORT_RANKS and r["ber"] in (0.0, cfg.trace_ber)]
    summary["tradeoff"]["rows_64_ranks"] = rows  # the report's opening sentence reads these
    missing = missing_settings(rows, (0.0, cfg.trace_ber), trained_guards=cfg.train_guards)
    summary["tradeoff"]["missing_64_ranks"] = missing
    md = ["## 5. Is skipping FEC worth it? Step time vs loss penalty", "",
          "Time side **modelled** for GPT-2 small (124M parameters, 0.5M tokens per step, H100 at 40% MFU) with DDP "
          "on DGX H100 nodes (8 GPUs on NVLink, 8 x 400G InfiniBand, rail-optimized), NCCL's algorithm choice and "
          "simulated loss recovery (`protocol/cluster/`, docs/cluster.md); "
          "loss side **measured** in section 4 (the small model's loss penalty, taken to carry over). These step "
          "times are not section 4's `step_ms` (the small model's CPU wall time on this machine). Rows at 64 ranks; "
          "`vs_ref` = time to the target loss over error-free KP4's (< 1: faster). All sizes in "
          "`tradeoff/tradeoff.csv`.", "",
          "| mode | BER | guard | step (ms, model) | PHY (us, model) | resends (ms, model) | loss penalty (measured) "
          "| time to target (s, model x measured) | vs_ref |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['mode']} | {r['ber']:g} | {r['guard']} | {_fmt(r['step_ms'])} | {_fmt(r['phy_us'])} | "
                  f"{_fmt(r['resend_ms'])} | {_fmt(r['loss_penalty'])} | {_fmt(r['time_to_target_s'])} | "
                  f"{_fmt(r['vs_ref'])} |")
    md += ["", *_tradeoff_notes(rows, summary.get("latency_ns") or {}, missing), LOSS_PENALTY_MEANING + ".", "",
           "![step time vs loss penalty](tradeoff/pareto.png)", ""]
    _say(cfg, f"tradeoff done in {summary['steps']['tradeoff_s']:.1f} s")
    return md


def write_fec_hist(path: Path, symbol_error_hist, port: str = ADVISE_PORT) -> None:
    """``symbol_error_hist[w]`` (KP4 codewords with ``w`` pre-FEC symbol errors, as a trace counts them)
    written as ``ethtool --json --include-statistics --show-fec`` prints one port's FEC histogram: the
    form ``phy802 fec tail`` and ``phy802 advise`` read (one bin per count 0..t, the rest uncorrectable)."""
    import json

    from phy802.telemetry.bins import FecHistogram
    from phy802.telemetry.fit import CODES

    h = FecHistogram.from_counts(symbol_error_hist, CODES["kp4"].t, source=port)
    atomic_write_text(path, json.dumps([h.to_ethtool_json(port)], indent=1) + "\n")


def advise_argv(fec_hist: str, results: str | None, seed: int) -> list[str]:
    """The ``phy802 advise`` arguments of the demo's answer: its link's histogram, the cluster and
    workload of step 5 (``REPORT_RANKS`` GPUs of ``dgx-h100-ib``, DDP of GPT-2 small) and, when it
    trained, the loss side of step 4."""
    return ["--fec-hist", fec_hist, "--cluster", "dgx-h100-ib", "--nodes", str(REPORT_RANKS // _GPUS_PER_NODE),
            "--gpus-per-node", str(_GPUS_PER_NODE), "--workload", "ddp", "--model", "gpt2-124m",
            "--seed", str(seed), *(["--results", results] if results else [])]


def _advise_step(cfg: DemoConfig, out: Path, shown: Path, summary: dict) -> list[str]:
    """``phy802 advise`` on the run's own inputs (the same function the command runs); the verdict goes
    into ``summary['advise']``; returns the report section that supports it."""
    import json

    from phy802.runtime.jsonable import to_jsonable
    from phy802.cli.advise import add_arguments as a_args, answer

    t0 = time.perf_counter()
    hist = (summary["trace"]["meta"].get("codewords") or {}).get("symbol_error_hist")
    if not hist:
        raise ValueError(f"{summary['trace']['path']}: the trace's metadata has no field "
                         "'codewords.symbol_error_hist': no FEC histogram to answer from")
    write_fec_hist(out / "fec_hist.json", hist)
    results = "training" if cfg.train else None
    p = argparse.ArgumentParser()
    a_args(p)
    args = p.parse_args(advise_argv(str(out / "fec_hist.json"), results and str(out / results), cfg.seed))
    names = {str(out / "fec_hist.json"): str(shown / "fec_hist.json")}
    if results:
        names[str(out / results)] = str(shown / results)
    _say(cfg, "advise: the trace's FEC histogram + the cluster of step 5" + (" + the training's loss" * bool(results)))
    doc, _ = answer(args, shown=names)
    argv = ["phy802", "advise", *advise_argv(str(shown / "fec_hist.json"), results and str(shown / results), cfg.seed)]
    atomic_write_text(out / "advise.json", json.dumps(to_jsonable(doc), indent=1) + "\n")
    summary["advise"] = {"argv": argv, "verdict": doc["verdict"], "fec_hist": str(shown / "fec_hist.json"),
                         "json": str(shown / "advise.json")}
    summary["steps"]["advise_s"] = time.perf_counter() - t0
    _say(cfg, f"advise done in {summary['steps']['advise_s']:.1f} s: {doc['verdict']['sentence']}")
    return _advise_md(doc, argv, cfg, sum(int(x) for x in hist))


def _advise_md(doc: dict, argv: list[str], cfg: DemoConfig, codewords: int) -> list[str]:
    """The evidence under the verdict: what went in, the caveats, the port's checks, the scenarios."""
    import shlex

    v = doc["verdict"]
    c = doc["inputs"]["cluster"]
    md = ["## The answer: keep FEC or not on this run's link (`phy802 advise`)", "",
          f"The verdict above is what `phy802 advise` prints on this run's own inputs: the FEC histogram of the link "
          f"traced in section 3 (`fec_hist.json`: {codewords:,} KP4 codewords counted by their pre-FEC symbol "
          f"errors at BER {cfg.trace_ber:g}, measured; the form `ethtool --json --show-fec` prints), "
          f"{c['nodes'] * c['gpus_per_node']} GPUs ({c['nodes']} nodes x {c['gpus_per_node']}, "
          f"{doc['inputs']['time_side']}{', the cluster of section 5' if cfg.train else ''}) training GPT-2 small "
          "with DDP (model), and "
          + ("the loss side measured in section 4 (`training/`)." if cfg.train else
             "no loss side (`--no-train`: the modes that deliver errors are not considered).")
          + " `advise.json` holds its whole answer; the same command gives the same sentence:", "",
          "```", shlex.join(argv), "```", ""]
    md += [f"- caveat: {x}" for x in v["caveats"]]
    md += [f"- depends most on: {x}" for x in v["depends_on"]]
    md += [f"- missing: {x}" for x in doc["inputs"]["missing"]]
    md += ["", "Per port (counted: codewords; from the fitted law, model: BER, FER, margin; target FER "
           f"{doc['inputs']['target_fer']:.0e}):", "",
           "| port | codewords (measured) | law | pre-FEC BER [95%] | FER [95%] (KP4) | margin x | mode | why |",
           "|---|---|---|---|---|---|---|---|"]
    for x in doc["ports"]:
        mg = x["margin"]["value"] if x.get("margin") and x["margin"].get("value") is not None else None
        md.append(f"| {x['port']} | {x['codewords']:,} | {x['law'] or '-'} | {_iv(x['pre_fec_ber'])} | {_iv(x['fer'])} "
                  f"| {_fmt(mg)} | {x['mode']} | {_cell(x['why'])} |")
    md += ["", "Each receive mode checked on that port (the fastest allowed one wins):", "",
           "| port | mode | allowed | why |", "|---|---|---|---|"]
    for x in doc["ports"]:
        for m, ck in x["checks"].items():
            md.append(f"| {x['port']} | {m} | {'yes' if ck['allowed'] else 'no'} | {_cell(ck['why'])} |")
    md += ["", "Per scenario (step time and failure probability: model; loss penalty as marked):", "",
           "| workload | scenario | modes | step (ms) | p99 (ms) | vs FEC everywhere | P(fail) | loss penalty "
           "| time to target loss (s) | sources |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["workloads"]:
        modes = ", ".join(f"{m} x{k}" for m, k in r["modes"].items())
        lp = "n/a" if r["loss_penalty"] != r["loss_penalty"] else f"{r['loss_penalty']:+.3g}"
        src = f"step, P(fail): {r['source']['step']}; loss: {r['source']['loss_penalty']}"
        if "time_to_target_s" in r:
            src += f"; time to target: {r['source']['time_to_target']}"
        md.append(f"| {r['workload']} | {r['scenario']} | {modes} | {r['step_ms']:.5g} | {r['step_p99_ms']:.5g} | "
                  f"{r['vs_fec_everywhere']:.5f} | {r['failure_probability']:.2g} | {lp} | "
                  f"{_fmt(r.get('time_to_target_s'))} | {_cell(src)} |")
    return md + [""]


def _iv(d) -> str:
    """An advise value with its 95% interval, as ``advise`` prints it (``-`` when absent)."""
    from phy802.telemetry.fit import fmt_interval

    return "-" if not d else fmt_interval(d["value"], d.get("lo"), d.get("hi"))


def _cell(text: str) -> str:
    """``text`` safe inside a markdown table cell."""
    return str(text).replace("|", "\\|")


def _measured_step_header(table: str) -> str:
    """The training table with its ``step_ms`` column marked as what it is (measured CPU wall time)."""
    head, sep, rest = table.partition("\n")
    return head.replace("| step_ms |", "| step_ms (measured: CPU wall time here) |") + sep + rest


def _training_notes(rows: list[dict], steps: int) -> list[str]:
    """What the non-obvious counters of the training table mean, with this run's values."""
    out = ["", "`step_ms` is **measured**: wall time per step of this small model on this machine's CPU (it "
           "moves with the machine's load); it is not the modelled GPT-2 step time of section 5. "
           "`overflow_steps`: steps whose gradient global norm overflowed fp32 (a flipped exponent bit made a "
           "gradient ~1e38), so gradient clipping scaled the update to zero; `nonfinite_steps`: steps with an "
           "Inf/NaN gradient element; `skipped_steps`: steps the `skip_nonfinite_step` guard skipped."]
    for r in rows:
        n = r.get("overflow_steps") or 0
        n = int(n) if float(n).is_integer() else n  # a seed mean may be fractional
        if n:
            what = ("every update was zeroed, so the model never learned" if n >= steps
                    else f"{n} of {steps} updates were zeroed")
            out += ["", f"Here guard `{r['guard']}` at BER {r['ber']:g} has `overflow_steps = {n}` of {steps} steps: "
                    f"{what} (final loss {_fmt(r.get('final_val_loss'))})."]
    return out + [""]


#: why a mode may have no loss side at a BER with errors (protocol/tradeoff.py's loss-side rules)
_NO_LOSS_SIDE = {
    "unequal": "its loss side is a training run with `--fec unequal`, or a `bypass` run with guard "
               "`exponent_protection` (the bits `unequal` protects); the demo trains guards {guards} only "
               "(`phy802 experiment --guards exponent_protection` then `phy802 tradeoff --results` adds it)",
    "correct_no_indication": "its post-FEC BER at this BER is above the clean threshold and no run with its "
                             "errors was trained",
}


def missing_settings(rows: list[dict], bers, trained_guards=()) -> list[dict]:
    """(mode, BER) pairs of ``rows``' modes with no row at a BER in ``bers``, each with the reason."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    have = {(r["mode"], r["ber"]) for r in rows}
    out = []
    for m in modes:
        for b in bers:
            if (m, b) not in have:
                fec = m.split("/")[-1]
                why = _NO_LOSS_SIDE.get(fec, "no measured loss curve for its errors at this BER").format(
                    guards=", ".join(f"`{g}`" for g in trained_guards) or "-")
                out.append({"mode": m, "ber": b, "reason": why})
    return out


def _tradeoff_notes(rows: list[dict], lat: dict, missing: list[dict]) -> list[str]:
    """What PHY (us) sums, and the rows the table lacks, with this run's numbers."""
    out = []
    ref = next((r for r in rows if r["mode"] == "kp4/ieee" and r["ber"] == 0.0), None)
    if ref is not None and lat.get("kp4/ieee") and ref.get("phy_us"):
        hops = ref["phy_us"] * 1e3 / lat["kp4/ieee"]
        out.append(f"`PHY (us)` is the FEC receive latency summed over every sequential link hop of one step's "
                   f"collectives: for kp4/ieee {_fmt(ref['phy_us'])} us = {lat['kp4/ieee']:.1f} ns x {hops:,.0f} "
                   "sequential link hops. It is part of the communication "
                   "time, of which only what backward does not hide adds to the step.")
    for m in missing:
        out += ["", f"No **{m['mode']}** row at BER {m['ber']:g}: {m['reason']}."] if out else [
            f"No **{m['mode']}** row at BER {m['ber']:g}: {m['reason']}."]
    return out + ([""] if out else [])


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif isinstance(v, (list, tuple)) and len(v) > 16:
            nz = [i for i, x in enumerate(v) if x]
            out[key] = f"{len(v)} values, nonzero up to index {nz[-1] if nz else '-'}: {list(v[:nz[-1] + 1]) if nz else []}"
        else:
            out[key] = v if not isinstance(v, float) else f"{v:.6g}"
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="phy802-demo", help="output folder (default ./phy802-demo)")
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run (3 BER points, 1 s each, 1e9-bit trace, 40 training steps, one guard)")
    parser.add_argument("--no-train", action="store_true", help="skip the training step (no torch needed)")
    parser.add_argument("--workers", type=int_arg(1, 4096), default=None, help="sweep worker processes (default: all cores)")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr (default: shown)")
    add_seed(parser)
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    cfg = DemoConfig(out=args.out, seed=args.seed, train=not args.no_train, workers=args.workers,
                     progress=not args.no_progress)
    if args.quick:
        cfg = DemoConfig(out=cfg.out, seed=cfg.seed, train=cfg.train, workers=cfg.workers, progress=cfg.progress,
                         sweep_bers=(3e-4, 1.5e-3, 3e-3), sweep_seconds=1.0, sweep_max_codewords=200_000,
                         trace_bits=1e9, train_steps=40, train_layers=2, train_embd=64,
                         train_guards=("nan_to_zero_clamp",))
    s = run_demo(cfg)

    def text() -> str:
        v = s["vectors"]
        lines = [f"verdict: {s['advise']['verdict']['sentence']}",
                 f"vectors: {v['passed']} passed, {v['failed']} failed",
                 f"report: {Path(cfg.out) / 'report.md'}"]
        for k, t in s["steps"].items():
            lines.append(f"  {k[:-2]:<9} {t:6.1f} s")
        return "\n".join(lines)

    emit(args, s, text)
    return 0 if s["vectors"]["failed"] == 0 else 1
