"""The paper's run, prepared for one GPU: GPT-2 124M, BER {0, 1e-6, 1e-5, 1e-4} x {DDP, PP}; table as JSON + PNG.

What it runs (defaults; every one is an option):

* model ``gpt2-small``: GPT-2 small exactly (12 x 12 x 768, context 1024, vocabulary 50257 padded
  to 50304, tied embeddings, 124,475,904 parameters), bf16 autocast, AdamW, lr 6e-4 with warm-up
  and cosine decay, global norm clipping at 1.0 (GPT-2's recipe);
* data: ``--data DIR``, a nanoGPT token folder (GPT-2 BPE ``train.bin`` / ``val.bin``); without
  it the built-in KJV corpus as UTF-8 bytes inside GPT-2's vocabulary (no download needed);
* 2 ranks, DDP (2 replicas) and PP (2 stages, 1F1B, 4 microbatches), global batch 8 x 1024
  tokens, ``--steps`` 40 per run, one error-free shadow and three BERs per parallelism (8 runs);
* the paper's layer, as this project reads it: the link BER is the payload BER the collective
  sees, flips delivered raw (``--source independent``: independent stream-bit flips at that BER;
  FEC ``bypass``; no receive guard, ``--guard none``). [?] The paper's own code is not available
  here; the project's own reading (pre-FEC line BER from the protocol generator, tripled by the
  descrambler; the receive guards) is what ``phy802 experiment`` measures.
* validation: the fixed set of the first 100,000 validation tokens, every DDP replica.

On one GPU NCCL cannot give each rank its own device, so the ranks share it with gloo carrying
the CUDA tensors (``ReplayConfig.inner_backends["cuda"] = "gloo"``: all-reduce and broadcast natively, send/recv
through a host copy); with 2+ GPUs each rank gets its own GPU and NCCL. ``setup.inner`` in the
JSON says which. Budget: under 8 minutes on one H200 including start-up, estimated (not measured:
no GPU has run it yet); the script prints its estimate before it starts and its wall time at the end.

``--tiny`` is the CPU smoke test (CI): the same command with a 2-layer width-32 model, context 16,
2 steps, the stdlib corpus, on CPU.

Outputs in ``--out`` (refused if it is a foreign non-empty folder): ``table.md`` / ``table.csv`` /
``results.json`` / ``loss_ddp.png`` / ``loss_pp.png`` (the ``phy802 experiment`` set) and
``paper.json`` + ``paper.png`` (delta validation loss against BER, DDP and PP).

Usage::

    python benchmarks/paper_run.py --out DIR [--data TOKENS_DIR] [--steps 40] [--device auto]
    python benchmarks/paper_run.py --out DIR --tiny          # CPU smoke test

Work estimated over an hour (or, on CPU, over the free memory) is refused before it starts (exit
2; ``--force`` runs it anyway): the full run on CPU is estimated at about 9 hours.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

PAPER_BERS = (1e-6, 1e-5, 1e-4)
TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=4, microbatches=2, steps=2, corpus="stdlib",
            val_tokens=512, eval_iters=1, eval_interval=1, warmup=1)


def _args(argv):
    p = argparse.ArgumentParser(prog="paper_run.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output folder (created; a foreign non-empty folder is refused)")
    p.add_argument("--data", default=None, help="nanoGPT token folder (default: built-in KJV bytes)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto (cuda if visible)")
    p.add_argument("--steps", type=int, default=40, help="training steps per run (default 40)")
    p.add_argument("--batch-size", type=int, default=8, help="global sequences per step (default 8)")
    p.add_argument("--bers", default=",".join(f"{b:g}" for b in PAPER_BERS), help="default 1e-06,1e-05,0.0001")
    p.add_argument("--parallel", default="ddp,pp", help="default ddp,pp")
    p.add_argument("--guard", default="none", help="receive guard (default none: the paper's layer)")
    p.add_argument("--source", default="independent", help="error source (default independent: BER = payload BER)")
    p.add_argument("--seed", type=int, default=1, help="model/data seed (default 1)")
    p.add_argument("--link-seed", type=int, default=1, help="link seed (default 1)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, 2 steps, stdlib corpus")
    p.add_argument("--timeout", type=float, default=1800.0, help="wall-clock limit per parallelism (default 1800 s)")
    p.add_argument("--json", action="store_true", help="print paper.json on stdout")
    p.add_argument("--force", action="store_true",
                   help="run even when estimated to take over an hour, or on CPU to need more memory than is free")
    return p.parse_args(argv)


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for par, mk in (("ddp", "o"), ("pp", "s")):
        mine = sorted((r for r in rows if r["parallel"] == par and r["ber"] > 0), key=lambda r: r["ber"])
        if not mine:
            continue
        xs = [r["ber"] for r in mine]
        ys = [r["delta_val_loss"] if math.isfinite(r["delta_val_loss"]) else float("nan") for r in mine]
        (line,) = ax.plot(xs, ys, marker=mk, label=par.upper())
        for r in mine:
            if not math.isfinite(r["delta_val_loss"]):
                ax.annotate("NaN", (r["ber"], 0), color=line.get_color(), ha="center")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("link BER (payload bits)")
    ax.set_ylabel("val loss - error-free val loss")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("GPT-2 124M: link errors vs training", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    a = _args(argv)
    import torch

    from integration.experiment import ExperimentSpec, check_out, run_experiment, write_report
    from integration.train import build_config, estimate, resolve_device
    from phy802.runtime.output import atomic_write_bytes, atomic_write_text

    device = "cpu" if a.tiny else resolve_device(a.device)
    n_gpu = torch.cuda.device_count() if device == "cuda" else 0
    world = 2
    # ranks sharing one GPU: NCCL refuses duplicate devices, so gloo carries their CUDA tensors
    inner = "nccl" if device == "cuda" and n_gpu >= world and torch.distributed.is_nccl_available() else "gloo"
    bers = tuple(float(b) for b in a.bers.split(","))
    pars = tuple(a.parallel.split(","))
    kw = dict(TINY) if a.tiny else dict(block_size=1024, batch_size=a.batch_size, microbatches=4, steps=a.steps,
                                        eval_interval=10, eval_iters=2, warmup=max(1, a.steps // 10))
    if a.tiny:
        kw["steps"] = min(a.steps, kw["steps"])
    base = build_config(model="gpt2-small", parallel=pars[0], ber=0.0, seed=a.seed, link_seed=a.link_seed,
                        source=a.source, fec="bypass", world_size=world, device=device,
                        precision="fp32" if device == "cpu" else "bf16", schedule="1f1b", lr=6e-4, data=a.data,
                        threads=1 if device == "cpu" else 4, comm_timeout_s=600.0, **kw)
    from dataclasses import replace

    base = replace(base, replay=replace(base.replay, source=replace(base.replay.source, kind=a.source),
                                        inner_backends={"cpu": "gloo", "cuda": inner}))
    spec = ExperimentSpec(base=base, bers=bers, parallel=pars, guards=(a.guard,), seeds=(a.seed,),
                          link_seeds=(a.link_seed,))
    check_out(a.out)
    est = estimate(base)
    n_runs = len(pars) * (1 + len(bers))
    print(f"paper_run: {n_runs} runs of {base.steps} steps, gpt2-small ({est['params']:,} parameters"
          + (", tiny settings" if a.tiny else "") + f") on {device} ({n_gpu} GPU(s), inner {inner}); "
          f"estimated {est['seconds'] * n_runs / 60:.2g} min", file=sys.stderr)
    from phy802.runtime.resources import WorkRefused, check_budget

    try:  # refused up front, as phy802 train/experiment refuse (GPU memory is not the host's: CPU only)
        check_budget("paper_run", memory_bytes=est["memory_bytes"] if device == "cpu" else 0.0,
                     seconds=est["seconds"] * n_runs, force=a.force,
                     hint="--tiny is the CPU smoke test; the full run is meant for a GPU")
    except WorkRefused as exc:
        print(f"paper_run.py: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run_experiment(spec, timeout_s=a.timeout,
                          on_run=lambda par, seed, ber, guard: print(f"  done: {par} BER {ber:g}", file=sys.stderr))
    wall = time.perf_counter() - t0
    meta = {"script": "benchmarks/paper_run.py", "argv": sys.argv[1:] if argv is None else list(argv)}
    write_report(rows, a.out, meta)
    doc = {
        "setup": {"device": device, "gpus": n_gpu, "gpu_name": torch.cuda.get_device_name(0) if n_gpu else None,
                  "inner": inner, "world_size": world, "model": "gpt2-small", "tiny": a.tiny,
                  "params": rows[0]["seeds_detail"][0].get("n_params"), "data": a.data or f"{base.corpus} (bytes)",
                  "steps": base.steps, "tokens_per_step": base.batch_size * base.block_size,
                  "precision": base.precision, "guard": a.guard, "source": a.source, "fec": "bypass",
                  "val_tokens": rows[0]["seeds_detail"][0].get("val_tokens"), "torch": torch.__version__,
                  "wall_s": wall},
        "rows": [{"parallel": r["parallel"], "ber": r["ber"], "final_val_loss": r["final_val_loss"],
                  "delta_val_loss": r["delta_val_loss"], "overflow_steps": r["overflow_steps"],
                  "nonfinite_steps": r["nonfinite_steps"], "flips": r["flips"], "died": r["died"],
                  "step_ms": r["step_ms"]} for r in rows],
    }
    from phy802.runtime.jsonable import to_jsonable

    atomic_write_text(os.path.join(a.out, "paper.json"), json.dumps(to_jsonable(doc), indent=1))
    import tempfile

    with tempfile.TemporaryDirectory(prefix="phy802-paper-") as tmp:
        _plot(rows, os.path.join(tmp, "paper.png"))
        with open(os.path.join(tmp, "paper.png"), "rb") as fh:
            atomic_write_bytes(os.path.join(a.out, "paper.png"), fh.read())
    if a.json:
        print(json.dumps(to_jsonable(doc), indent=1))
    else:
        print("| parallel | BER | val loss | delta | overflow steps | non-finite steps |\n|---|---|---|---|---|---|")
        for r in doc["rows"]:
            print(f"| {r['parallel']} | {r['ber']:g} | {r['final_val_loss']:.4f} | {r['delta_val_loss']:+.4f} | "
                  f"{r['overflow_steps']:.0f} | {r['nonfinite_steps']:.0f} |")
        print(f"paper_run: {wall:.0f} s wall; written to {a.out}/ (paper.json, paper.png, table.*, loss_*.png)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
