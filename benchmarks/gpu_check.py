"""GPU check of the replay wrapper: one prepared script, one table.

On a GPU machine (``--device cuda``, the default when a GPU is visible) it runs, over NCCL:

1. **bit identity at BER 0**: DDP training of the model (default GPT-2 small preset, 12 x 12 x
   768, byte vocabulary, short context) for a few steps over plain NCCL and over the ``phy802``
   group (endpoint and ring modes), from the same initial weights and data: the final
   parameters must be bit-identical; plus the primitive ops (all_reduce, broadcast,
   all_gather_into_tensor, reduce_scatter_tensor, each called synchronously -- for which NCCL
   returns no Work -- and with ``async_op=True``; batched send/recv) on device tensors, one row
   per op, call and mode (ring mode at 3+ ranks against a reference summed in the ring's order; batched
   send/recv against the peer's input, since plain gloo cannot send CUDA tensors). A row whose op
   raises is a FAIL with the error, and the check goes on.
1c. **no host sync** (CUDA only): a DDP backward through the wrapper at ``--ber`` (clamp guard)
   under ``torch.cuda.set_sync_debug_mode("error")`` must raise nothing. With one GPU the inner is
   gloo, whose CUDA path stages through host memory, so a FAIL there may be gloo's, not the wrapper's:
1d. **no host sync in the wrapper's own code** (any device): the same backward over a wrapper whose
   inner is torch's fake group (no transport), under ``set_sync_debug_mode("error")`` on CUDA; on
   CPU the device path is forced and ``integration.host_sync``'s dispatch-level detector stands in.
2. **flip-rate honesty**: all-reduces of a device tensor with independent stream-bit errors at
   ``--ber``: the flip rate per payload bit must lie in its 99.9% Clopper-Pearson interval around
   the configured BER, and the popcount of (wrapper result XOR plain result) must equal the
   number of flips the wrapper logged (every logged flip is in the tensor, nothing else is).
3. **overhead**: median step time of the same model over plain NCCL and over the wrapper (BER 0
   and ``--ber``, guard ``nan_to_zero_clamp``), alternating blocks of steps in the same processes.

NCCL needs one GPU per rank; on a machine with one GPU the ranks share it over gloo for CUDA
tensors (``ReplayConfig.inner_backends["cuda"] = "gloo"``) and the table says so: there, no row tests the NCCL contract
(futures done at enqueue, sends waiting for their receiver, no Work for a synchronous op), and row
1c's sync check is gloo's. Those rows need 2+ GPUs. ``--device cpu --tiny`` runs the same
checks on CPU with gloo and a tiny model: the smoke test of this script (``tests/integration``).
The wrapper's NCCL code path without a GPU (every op, dtype and mode, synchronous and
asynchronous, against a CPU stand-in that behaves like NCCL) is a test, not a mode of this script:
``tests/integration/test_it_nccl_contract.py``.

For one short run on one H200 (target < 5 min; the ranks share the GPU over gloo for CUDA
tensors, ``inner gloo`` in the table): ``python benchmarks/gpu_check.py --out gpu_check.json``.

Usage::

    python benchmarks/gpu_check.py [--device auto|cpu|cuda] [--tiny] [--world-size N] [--steps 6]
                                   [--ber 1e-5] [--block 128] [--json] [--out FILE] [--force]

Refused up front (exit 2): ``--out`` where phy802 may not write it, ``--device cuda`` with no GPU
visible, and a model that would not fit in memory (host memory on CPU, each GPU's on CUDA).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from phy802.runtime.output import atomic_write_text  # noqa: E402


def _worker(rank: int, args: argparse.Namespace, store: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig
    from integration.train import TrainConfig, _clip_global, _optimizer

    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world_size)
    plain_backend = "nccl" if (cuda and args.nccl) else "gloo"
    g_plain = dist.new_group(backend=plain_backend)
    groups = {}
    for name, mode, ber, guard in (("ber0_endpoint", "endpoint", 0.0, "nan_to_zero_clamp"),
                                   ("ber0_ring", "ring", 0.0, "none"),
                                   ("noisy", "endpoint", args.ber, "nan_to_zero_clamp"),
                                   ("noisy_raw", "endpoint", args.ber, "none")):
        # ranks sharing a GPU: NCCL refuses duplicate devices, so gloo carries their CUDA tensors
        register(ReplayConfig(source=SourceConfig(ber=ber, seed=7, kind="independent", fec="bypass"), mode=mode,
                              guard=guard, classes=("gradients", "params", "activations", "activation_grads"),
                              inner_backends={"cpu": "gloo", "cuda": "nccl" if args.nccl else "gloo"}))
        groups[name] = dist.new_group(backend="phy802")
    rows: list[tuple[str, str, str]] = []

    # 1a. primitive ops at BER 0 on device tensors: one row per op and mode. Ring mode at 3+ ranks
    # sums in ring order, so its all-reduce / reduce-scatter are compared with a reference summed
    # in that order from all ranks' inputs (gathered over the plain group), not with NCCL's order.
    from integration.process_group import gloo_ring_chunks

    gen = torch.Generator().manual_seed(100 + rank)
    n = args.world_size
    x = torch.randn(n * (1 << 14) + 0, generator=gen).to(dev)  # a multiple of n (reduce-scatter)
    # every rank's input, for the references: gathered as host copies over the default (CPU gloo)
    # group, so the references do not depend on which device ops the plain backend supports
    xc = [torch.empty(x.numel()) for _ in range(n)]
    dist.all_gather(xc, x.cpu())
    xs = torch.stack(xc).to(dev)

    def ring_sum(lo: int, hi: int, c: int) -> torch.Tensor:
        acc = xs[(c - 1) % n, lo:hi].clone()  # the wrapper's ring: x_c + (x_c+1 + (... + x_c-1))
        for j in range(2, n + 1):
            acc = xs[(c - j) % n, lo:hi] + acc
        return acc

    def ring_ref(op: str) -> torch.Tensor:
        if op == "all_reduce":
            return torch.cat([ring_sum(a, b, c) for c, (a, b) in enumerate(gloo_ring_chunks(x.numel(), 4, n))])
        k = x.numel() // n
        return ring_sum(rank * k, (rank + 1) * k, rank)

    def done(work) -> None:  # async_op=True returns a Work; a synchronous call (NCCL: no Work) None
        if work is not None:
            work.wait()

    def prim(op: str, grp, async_op: bool = False):
        if op == "all_reduce":
            a = x.clone(); done(dist.all_reduce(a, group=grp, async_op=async_op)); return a
        if op == "broadcast":
            b = x.clone(); done(dist.broadcast(b, src=n - 1, group=grp, async_op=async_op)); return b
        if op == "all_gather_into_tensor":
            c = torch.empty(n * x.numel(), device=dev)
            done(dist.all_gather_into_tensor(c, x, group=grp, async_op=async_op))
            return c
        if op == "reduce_scatter_tensor":
            d = torch.empty(x.numel() // n, device=dev)
            done(dist.reduce_scatter_tensor(d, x, group=grp, async_op=async_op))
            return d
        e = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % n, grp), dist.P2POp(dist.irecv, e, (rank - 1) % n, grp)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return e

    for gname in ("ber0_endpoint", "ber0_ring"):
        mode = gname.split("_")[1]
        # each collective called synchronously (dist.all_reduce(t): opts.asyncOp False, for which
        # NCCL returns no Work) and asynchronously (async_op=True, then wait()); batched p2p is async
        for op, async_op in [(o, a) for o in ("all_reduce", "broadcast", "all_gather_into_tensor",
                                              "reduce_scatter_tensor") for a in (False, True)] + [("batched_p2p", True)]:
            ringed = mode == "ring" and n >= 3 and op in ("all_reduce", "reduce_scatter_tensor")
            # batched p2p: what rank r receives is rank r-1's input, known from the gathered inputs
            # (plain gloo has no send/recv of CUDA tensors, the inner when ranks share one GPU)
            try:
                ref = ring_ref(op) if ringed else (xs[(rank - 1) % n] if op == "batched_p2p" else prim(op, g_plain))
                ok, why = bool(torch.equal(ref, prim(op, groups[gname], async_op))), ""
            except Exception as exc:  # noqa: BLE001 - a row's error goes into the table (every rank runs the same op)
                ok, why = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            flags = [None] * n
            dist.all_gather_object(flags, (ok, why))
            if rank == 0:
                errs = [w for _, w in flags if w]
                ref_name = ("ring-order reference" if ringed else
                            "the peer's input" if op == "batched_p2p" else "plain")
                kind = "" if op == "batched_p2p" else (" async" if async_op else " sync")
                rows.append((f"BER 0: {op}{kind}, {mode} mode == {ref_name}", "PASS" if all(f for f, _ in flags) else "FAIL",
                             errs[0] if errs else f"{plain_backend}, {n} ranks"))

    # the model
    corpus = CharCorpus.load("stdlib", "byte")
    preset = dict(n_layer=2, n_head=2, n_embd=32) if args.tiny else dict(n_layer=12, n_head=12, n_embd=768)
    gcfg = GPTConfig(corpus.vocab_size, args.block, **preset)
    tcfg = TrainConfig()
    per_rank = args.batch

    def make(grp):
        torch.manual_seed(1)
        model = DDP(GPT(gcfg).to(dev), process_group=grp, device_ids=[dev.index] if cuda else None)
        return dict(model=model, opt=_optimizer(tcfg, list(model.parameters())), grp=grp,
                    gen=torch.Generator().manual_seed(10 + rank), times=[])

    def step(r):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        r["opt"].zero_grad(set_to_none=True)
        xb, yb = corpus.batch("train", per_rank, args.block, r["gen"])
        xb, yb = xb.to(dev), yb.to(dev)
        logits = r["model"](xb)
        F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1)).backward()
        _clip_global(list(r["model"].parameters()), 1.0, r["grp"], across=False)
        r["opt"].step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    # 1b. DDP training bit identity at BER 0
    runs = {k: make(g) for k, g in (("plain", g_plain), ("ber0_endpoint", groups["ber0_endpoint"]),
                                     ("ber0_ring", groups["ber0_ring"]))}
    for _ in range(args.steps):
        for r in runs.values():
            step(r)
    flat = {k: torch.cat([p.detach().reshape(-1) for p in r["model"].parameters()]) for k, r in runs.items()}
    for k in ("ber0_endpoint", "ber0_ring"):
        same = torch.equal(flat["plain"], flat[k])
        rows.append((f"BER 0: DDP {args.steps} steps, {k.split('_')[1]} mode, params == plain", "PASS" if same else "FAIL",
                     f"{sum(p.numel() for p in runs['plain']['model'].parameters()) / 1e6:.3g} M parameters"))
    del runs, flat  # at most _REPLICAS_ALIVE replicas at once (main's memory check)

    # 1c. no host sync on the CUDA path: a DDP backward (bucket all-reduces through the wrapper at
    # --ber, clamp guard) under torch.cuda.set_sync_debug_mode("error") must raise nothing
    if cuda:
        r = make(groups["noisy"])
        step(r)  # warm-up: NCCL communicators, allocator, Numba
        xb, yb = corpus.batch("train", per_rank, args.block, r["gen"])
        xb, yb = xb.to(dev), yb.to(dev)
        logits = r["model"](xb)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1))
        torch.cuda.synchronize()
        err = None
        torch.cuda.set_sync_debug_mode("error")
        try:
            loss.backward()
        except RuntimeError as exc:  # a synchronizing CUDA call inside the wrapper or DDP
            err = str(exc).splitlines()[0][:150]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        del r, logits, loss
        flags = [None] * n
        dist.all_gather_object(flags, err)
        if rank == 0:
            bad = [f for f in flags if f]
            rows.append((f"no host sync: DDP backward through the wrapper, BER {args.ber:g}, sync_debug_mode error",
                         "FAIL" if bad else "PASS", bad[0] if bad else f"{n} ranks"))

    # 1d. no host sync in the wrapper's own code, any GPU count: DDP over the wrapper whose inner is
    # torch's fake group (rank 0 of 2 in this process; completes at once, moves no data), so the
    # check sees the wrapper's device path and DDP's reducer and no transport (gloo's CUDA path, the
    # inner when ranks share a GPU, stages through host memory by design). On CPU (the smoke test)
    # the device path is forced and integration.host_sync's dispatch-level detector stands in for
    # set_sync_debug_mode("error").
    if rank == 0:
        rows.append(_sync_check_fake_inner(dev, gcfg, corpus, per_rank, args))

    # 2. flip-rate honesty on device tensors (no guard: every flipped bit stays visible)
    g = groups["noisy_raw"]
    before = len(g.log)
    bits = 0
    xor_pop = 0
    y = torch.randn(1 << 18, generator=gen).to(dev)
    for _ in range(args.flip_reps):
        a, b = y.clone(), y.clone()
        dist.all_reduce(a, group=g_plain)
        dist.all_reduce(b, group=g)
        xo = (a.view(torch.int32) ^ b.view(torch.int32)).cpu().numpy().view("uint32")
        import numpy as np

        xor_pop += int(np.unpackbits(xo.view(np.uint8)).sum())
        bits += 32 * y.numel()
    logged = len(g.log) - before
    totals = [None] * n
    dist.all_gather_object(totals, (logged, bits, xor_pop))
    if rank == 0:
        from phy802.stats import clopper_pearson

        k_all = sum(t[0] for t in totals)
        n_all = sum(t[1] for t in totals)
        lo, hi = clopper_pearson(k_all, n_all, 0.999)
        ok_rate = lo <= args.ber <= hi
        ok_pop = all(t[0] == t[2] for t in totals)
        rows.append(("flip rate per payload bit within 99.9% CI of --ber", "PASS" if ok_rate else "FAIL",
                     f"{k_all}/{n_all} = {k_all / max(n_all, 1):.3g} (CI {lo:.3g}..{hi:.3g}, BER {args.ber:g})"))
        rows.append(("popcount(wrapper XOR plain) == flips logged, every rank", "PASS" if ok_pop else "FAIL",
                     ", ".join(f"r{i}: {t[2]}/{t[0]}" for i, t in enumerate(totals))))

    # 3. overhead: plain vs wrapper BER 0 vs wrapper --ber, alternating blocks, same processes
    timing = {"plain": make(g_plain), "wrapper_ber0": make(groups["ber0_endpoint"]), "wrapper_ber": make(groups["noisy"])}
    for r in timing.values():
        for _ in range(2):
            step(r)  # warm-up
    steps_done = 0
    while steps_done < args.steps:
        for r in timing.values():
            for _ in range(args.block_steps):
                r["times"].append(step(r))
        steps_done += args.block_steps
    med = {k: 1e3 * statistics.median(r["times"]) for k, r in timing.items()}
    # each rank's peak memory over the whole check, against main's up-front estimate
    import resource

    peaks = [None] * n
    dist.all_gather_object(peaks, {"host_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                                   "gpu_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None})
    if rank == 0:
        rows.append(("step time, plain (ms, median)", f"{med['plain']:.2f}", f"DDP x{n}, batch {per_rank}/rank, "
                                                                             f"context {args.block}"))
        rows.append(("step time, wrapper BER 0 (ratio to plain)", f"{med['wrapper_ber0'] / med['plain']:.3f}",
                     f"{med['wrapper_ber0']:.2f} ms"))
        rows.append((f"step time, wrapper BER {args.ber:g} + clamp (ratio to plain)",
                     f"{med['wrapper_ber'] / med['plain']:.3f}", f"{med['wrapper_ber']:.2f} ms"))
        with open(out, "w") as fh:
            json.dump({"rows": rows, "ms": med, "peak_memory": peaks}, fh)
    dist.barrier()
    dist.destroy_process_group()


def _sync_check_fake_inner(dev, gcfg, corpus, per_rank: int, args) -> tuple[str, str, str]:
    """Row 1d: one DDP backward over the wrapper (fake inner, ``--ber``, clamp guard) under
    :func:`integration.host_sync.no_host_sync`: PASS when nothing synchronised the host."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.host_sync import no_host_sync
    from integration.model import GPT
    from integration.process_group import ReplayProcessGroup
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    name = (f"no host sync: DDP backward through the wrapper's own code (fake inner), BER {args.ber:g}, "
            + ("sync_debug_mode error" if dev.type == "cuda" else "dispatch-level detector (CPU)"))
    cfg = ReplayConfig(source=SourceConfig(ber=args.ber, seed=7, kind="independent", fec="bypass"),
                       guard="nan_to_zero_clamp", classes=("gradients", "params"))
    g = ReplayProcessGroup.standalone(cfg)
    g.force_device_path = dev.type != "cuda"
    try:
        torch.manual_seed(1)
        model = DDP(GPT(gcfg).to(dev), process_group=g, device_ids=[dev.index] if dev.type == "cuda" else None)
        gen = torch.Generator().manual_seed(3)

        def loss():
            xb, yb = corpus.batch("train", per_rank, args.block, gen)
            logits = model(xb.to(dev))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), yb.to(dev).view(-1))

        loss().backward()  # warm-up: allocator, Numba, the link's read-ahead
        lo = loss()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        with no_host_sync(dev) as det:
            lo.backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        hits = det.hits if det is not None else []
        flips = g.metrics.total("errors_injected")  # read after the block: one transfer
    except Exception as exc:  # noqa: BLE001 - reported as the row's failure, with its message
        return name, "FAIL", f"{type(exc).__name__}: {str(exc).splitlines()[0][:150] if str(exc) else ''}"
    if hits:
        return name, "FAIL", ", ".join(sorted(set(hits)))[:150]
    return name, "PASS", f"{flips} flips applied on the device path"


# DDP replicas of the model alive at once in one rank (three in the identity check 1b, three in the
# overhead check 3, one in between), and what each holds: parameters, gradients, DDP's bucket copies
# and AdamW's two moments, 20 bytes per parameter, plus activations and the allocator's slack.
# Measured on CPU with the GPT-2 small preset (85.5 M parameters): 1.7-1.9 GiB per replica, and a
# peak of 6.66 GiB per rank over the whole check; the estimate (26 bytes per parameter per replica
# and 1 GiB per rank for torch, Numba and the rest) gives 7.2 GiB
_REPLICAS_ALIVE = 3
_BYTES_PER_PARAM = 26
_RANK_BASE_BYTES = 1 << 30


def _check_out(p: argparse.ArgumentParser, path: str | None, force: bool) -> None:
    """Refuse ``--out`` up front where it may not be written (phy802's output rule), not after the run."""
    if path is None:
        return
    from phy802.runtime.output import OutputRefused, check_output_file

    try:
        check_output_file(path, force=force)
    except (OutputRefused, IsADirectoryError) as exc:
        p.error(f"--out {path}: {exc.strerror}")


def _model_params(args) -> int:
    """Parameters of the check's model, counted on the meta device (nothing allocated)."""
    import torch

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig

    preset = dict(n_layer=2, n_head=2, n_embd=32) if args.tiny else dict(n_layer=12, n_head=12, n_embd=768)
    with torch.device("meta"):
        model = GPT(GPTConfig(CharCorpus.load("stdlib", "byte").vocab_size, args.block, **preset))
    return sum(q.numel() for q in model.parameters())


def _rank_bytes(args) -> int:
    """The up-front estimate of one rank's peak memory (host on CPU, its GPU's on CUDA)."""
    return _REPLICAS_ALIVE * _BYTES_PER_PARAM * _model_params(args) + _RANK_BASE_BYTES


def _memory_refusal(args, n_gpu: int, per_rank: int) -> str | None:
    """Why ranks of ``per_rank`` bytes (:func:`_rank_bytes`) would not fit in memory (host for
    ``--device cpu``: the free memory, as phy802's commands count it; each GPU's for ``cuda``), or None."""
    import torch

    from phy802.runtime.resources import available_memory

    if args.device == "cuda":
        per_gpu = -(-args.world_size // n_gpu)  # ranks sharing one GPU
        have = min(torch.cuda.get_device_properties(i).total_memory for i in range(n_gpu))
        need = per_gpu * per_rank
        where = f"{per_gpu} rank(s) per GPU, {have / 2**30:.1f} GiB per GPU"
    else:
        have = available_memory()
        need = args.world_size * per_rank
        where = f"{args.world_size} ranks on the host, {have / 2**30:.1f} GiB available"
    if need <= have:
        return None
    return (f"the check's model ({'tiny' if args.tiny else 'GPT-2 small preset'}) needs about "
            f"{need / 2**30:.1f} GiB ({where}): use --tiny, fewer --world-size ranks, or a bigger machine")


def main(argv: list[str] | None = None) -> int:
    import shutil

    import torch
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto (cuda if visible)")
    p.add_argument("--tiny", action="store_true", help="2-layer width-32 model instead of the GPT-2 small preset")
    p.add_argument("--world-size", type=int, default=None, help="ranks (default: GPUs visible, at least 2)")
    p.add_argument("--steps", type=int, default=6, help="DDP steps for the identity check and per timed variant (default 6)")
    p.add_argument("--block-steps", type=int, default=2, help="steps per alternation block (default 2)")
    p.add_argument("--ber", type=float, default=1e-5, help="stream BER of the noisy checks (default 1e-5)")
    p.add_argument("--block", type=int, default=128, help="context length (default 128)")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank and step (default 4)")
    p.add_argument("--flip-reps", type=int, default=20, help="all-reduces of 2^18 elements for the flip rate (default 20)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    p.add_argument("--force", action="store_true", help="let --out replace a file phy802 did not write")
    args = p.parse_args(argv)
    for name in ("steps", "block_steps", "block", "batch", "flip_reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 < args.ber < 1:
        p.error(f"--ber must be in (0, 1), got {args.ber}")
    if args.world_size is not None and args.world_size < 2:
        p.error(f"--world-size must be at least 2, got {args.world_size}")
    _check_out(p, args.out, args.force)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    n_gpu = torch.cuda.device_count() if args.device == "cuda" else 0
    if args.device == "cuda" and n_gpu == 0:
        p.error("--device cuda: no GPU is visible (--device cpu --tiny runs the check's smoke test on CPU)")
    if args.world_size is None:
        args.world_size = max(2, n_gpu)
    args.nccl = args.device == "cuda" and n_gpu >= args.world_size and torch.distributed.is_nccl_available()
    per_rank = _rank_bytes(args)  # builds the model on the meta device: once
    why = _memory_refusal(args, n_gpu, per_rank)
    if why is not None:  # refused up front: a rank killed for memory midway says nothing useful
        p.error(why)
    work = tempfile.mkdtemp(prefix="phy802-gpucheck-")
    try:
        out = os.path.join(work, "res.json")
        store = os.path.join(work, "store")
        os.environ["OMP_NUM_THREADS"] = "1"
        t0 = time.perf_counter()
        try:
            mp.start_processes(_worker, args=(args, store, out), nprocs=args.world_size, start_method="spawn")
        except mp.ProcessRaisedException as exc:  # the rank's own traceback is in the message
            print(f"gpu_check: error: rank {exc.error_index} failed:{exc.msg}", file=sys.stderr)
            return 1
        except mp.ProcessExitedException as exc:  # killed by a signal (out of memory: SIGKILL) or exited
            print(f"gpu_check: error: {exc} (the memory check estimated {per_rank / 2**30:.1f} GiB "
                  "per rank)", file=sys.stderr)
            return 1
        with open(out) as fh:
            res = json.load(fh)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["setup"] = {"device": args.device, "gpus": n_gpu, "world_size": args.world_size,
                    "inner": "nccl" if args.nccl else "gloo", "model": "tiny" if args.tiny else "gpt2-small preset",
                    "torch": torch.__version__, "seconds": time.perf_counter() - t0,
                    "gpu_name": torch.cuda.get_device_name(0) if n_gpu else None,
                    "memory_estimate_gib_per_rank": per_rank / 2**30,
                    "peak_memory_per_rank": res.pop("peak_memory")}
    failed = [r for r in res["rows"] if r[1] == "FAIL"]
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1), force=args.force)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        s = res["setup"]
        print(f"gpu_check: {s['device']} ({s['gpu_name'] or 'no GPU'}), {s['world_size']} ranks, inner {s['inner']}, "
              f"{s['model']}, torch {s['torch']}, {s['seconds']:.0f} s")
        pk = s["peak_memory_per_rank"]
        host = ", ".join(f"{q['host_gib']:.2f}" for q in pk)
        gpu = ", ".join(f"{q['gpu_gib']:.2f}" for q in pk) if pk[0]["gpu_gib"] is not None else None
        print(f"peak memory per rank: host {host} GiB" + (f", GPU {gpu} GiB" if gpu else "")
              + f" (estimated up front: {s['memory_estimate_gib_per_rank']:.2f} GiB)")
        print("| check | result | detail |\n|---|---|---|")
        for r in res["rows"]:
            print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
