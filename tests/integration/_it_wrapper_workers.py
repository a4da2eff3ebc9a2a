"""Per-rank bodies for the issue-23 tests of the replay wrapper (importable by spawned processes)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist


def _dumps_crash(worker):
    """A spawned worker that writes its traceback to its output file (``out_dir``: the last
    argument) before the exception ends the process, so the test shows why a rank died."""

    @functools.wraps(worker)
    def run(rank: int, *args) -> None:
        try:
            worker(rank, *args)
        except BaseException:
            _dump(args[-1], rank, {"crash": traceback.format_exc()})
            raise
    return run


def _dump(out_dir: str, rank: int, out: dict) -> None:
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(out, fh)


@_dumps_crash
def lost_frames_worker(rank: int, n: int, store: str, fec: str, ber: float, op: str, out_dir: str) -> None:
    """One op at a BER where frames are lost: every rank must raise LinkFailure, none may get clean data."""
    torch.set_num_threads(1)
    from integration.process_group import register
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    register(ReplayConfig(source=SourceConfig(ber=ber, seed=3, kind="independent", fec=fec),
                          classes=("gradients", "params", "activations", "activation_grads")))
    timeout = timedelta(seconds=20)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    g = dist.new_group(backend="phy802", timeout=timeout)
    x = torch.full((1 << 16,), float(rank + 1))
    out: dict = {"raised": None, "type": None, "clean": None, "refused": None, "at": "op"}
    t0 = time.monotonic()
    try:
        if op == "allreduce":
            dist.all_reduce(x, group=g)
            out["clean"] = bool(torch.all(x == sum(range(1, n + 1))))
        elif op == "broadcast":
            dist.broadcast(x, src=0, group=g)
            out["clean"] = bool(torch.all(x == 1.0))
        elif op == "recv":
            if rank == 0:
                dist.send(x, 1, group=g)
            else:
                dist.recv(x, 0, group=g)
                out["clean"] = bool(torch.all(x == 1.0))
        out["at"] = "barrier"
        dist.barrier(group=g)  # not reached: every rank's op fails, the sender's too (its queue pair)
    except LinkFailure as exc:
        out["raised"], out["type"] = str(exc), "LinkFailure"
    except Exception as exc:  # noqa: BLE001 - what the test checks
        out["raised"], out["type"] = f"{type(exc).__name__}: {exc}"[:500], type(exc).__name__
    out["seconds"] = time.monotonic() - t0
    try:
        dist.all_reduce(torch.ones(4), group=g)
        out["refused"] = False
    except LinkFailure:
        out["refused"] = True
    m = g.metrics
    out.update(frames_lost=m.total("frames_lost"), frames_resent=m.total("frames_resent"),
               op_failures=m.total("op_failures"), flips=m.total("errors_injected"))
    _dump(out_dir, rank, out)
    os._exit(0)  # the failed group's pending inner ops would hold teardown until the gloo timeout


@_dumps_crash
def in_band_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """Store look-ups per op, and a loss on rank 1 only, for the in-band signal of float SUM all-reduces."""
    import dataclasses

    torch.set_num_threads(1)
    from integration.process_group import register
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    # BER 1e-12: the link is not error-free (every message goes through the delivery model), no flips
    register(ReplayConfig(source=SourceConfig(ber=1e-12, seed=3, kind="independent")))
    timeout = timedelta(seconds=20)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    g = dist.new_group(backend="phy802", timeout=timeout)

    # the completion look-ups (ReplayProcessGroup._check_peer, one store.check each); a wait that
    # blocks also polls the store (_peer_poll), which depends on timing and is not counted here
    looks = {"n": 0}
    check_peer = g._check_peer

    def counted(*a, **k):
        looks["n"] += 1
        return check_peer(*a, **k)

    g._check_peer = counted
    out: dict = {}

    def looked_up(fn):
        c = looks["n"]
        fn()
        return looks["n"] - c

    x = torch.full((4096,), float(rank + 1))
    out["sum_lookups"] = looked_up(lambda: dist.all_reduce(x, group=g))
    out["sum_ok"] = bool(torch.all(x == 3.0))
    out["int_lookups"] = looked_up(lambda: dist.all_reduce(torch.ones(4096, dtype=torch.int32), group=g))
    out["max_lookups"] = looked_up(lambda: dist.all_reduce(torch.ones(4096), op=dist.ReduceOp.MAX, group=g))
    y = torch.ones(4096)
    if rank == 0:
        y[0] = math.nan  # a NaN of the data's own (no frame lost): looked up, delivered, no failure
    out["nan_lookups"] = looked_up(lambda: dist.all_reduce(y, group=g))
    out["nan_ok"] = bool(math.isnan(float(y[0])) and torch.all(y[1:] == 2.0))
    dist.barrier()  # plain gloo: both ranks are done with the ops above before rank 1's link fails
    if rank == 1:  # rank 1's link loses a frame in the next all-reduce; rank 0's link loses nothing
        orig = g._deliver

        def lossy(*a, **k):
            d = orig(*a, **k)
            return dataclasses.replace(d, frames_lost=1, frames_resent=7)

        g._deliver = lossy
    z = torch.ones(4096)
    try:
        dist.all_reduce(z, group=g)
        out["raised"] = None
    except LinkFailure as exc:
        out["raised"] = str(exc)
    _dump(out_dir, rank, out)
    os._exit(0)  # the failed group's pending inner ops would hold teardown until the gloo timeout


@_dumps_crash
def loss_order_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """A DDP step's two all-reduces, the int flag (looked up in the store at every op) then the float
    gradients, with rank 0's link losing a frame in the gradients, and both races of the training run
    forced: rank 1 looks the failure up for the flag only once rank 0 has noted its loss in the
    gradients (rank 0 runs ahead: its flag all-reduce completed without rank 1's look-up), and rank 0's
    own completion of the gradients runs before its issuing thread puts the group in error."""
    import dataclasses
    import threading

    torch.set_num_threads(1)
    from integration.process_group import _FAILED_KEY, register
    from integration.replay import LinkFailure, ReplayConfig
    from integration.sources import SourceConfig

    # BER 1e-12: every message goes through the delivery model, no frame lost but the forced one
    register(ReplayConfig(source=SourceConfig(ber=1e-12, seed=3, kind="independent")))
    timeout = timedelta(seconds=20)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    g = dist.new_group(backend="phy802", timeout=timeout)
    out: dict = {}
    if rank == 1:  # the flag's completion look-up waits until rank 0 has written the failure key
        check = g._check_peer

        def late(what, *a, **k):
            if not out.get("waited"):
                g._store.wait([_FAILED_KEY], timedelta(seconds=15))
                out["waited"] = True
            return check(what, *a, **k)

        g._check_peer = late
    else:  # rank 0: the group goes to error only after the gradients' completion has looked up
        looked = threading.Event()
        after, fail = g._check_peer_after, g._fail

        def seen(what, summed, *a, **k):
            try:
                return after(what, summed, *a, **k)
            finally:
                if summed is not None:  # the float all-reduce (the flag's has no in-band element)
                    looked.set()

        def late_fail(work, loss):
            out["completed_first"] = looked.wait(15)
            return fail(work, loss)

        g._check_peer_after, g._fail = seen, late_fail
    for name, t in (("flag", torch.zeros(1, dtype=torch.int32)), ("grads", torch.ones(4096))):
        if name == "grads" and rank == 0:  # link 1 -> 0 loses a frame of the gradients
            orig = g._deliver
            g._deliver = lambda *a, **k: dataclasses.replace(orig(*a, **k), frames_lost=1, frames_resent=7)
        try:
            dist.all_reduce(t, group=g)
            out[name] = None
        except LinkFailure as exc:
            out[name] = str(exc)
    f = g.failed
    out["failed_link"] = list(f.link) if f is not None and f.link is not None else None
    _dump(out_dir, rank, out)
    dist.barrier()  # default group: both ranks issued the same ops on g, nothing is left pending
    dist.destroy_process_group()


def _lossy_chain(rank: int, n: int, store: str):
    """The pipeline workers' group: ieee at stream BER 1e-3, so every frame of the 256 KiB activation
    0 -> 1 is lost; group timeout 20 s. Returns ``(group, this stage's activation)``."""
    torch.set_num_threads(1)
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    register(ReplayConfig(source=SourceConfig(ber=1e-3, seed=3, kind="independent", fec="ieee")))
    timeout = timedelta(seconds=20)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    return dist.new_group(backend="phy802", timeout=timeout), torch.full((1 << 16,), float(rank + 1))


@_dumps_crash
def pipeline_loss_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """A 3-stage chain 0 -> 1 -> 2 whose first message is lost: stage 2 must fail promptly."""
    g, x = _lossy_chain(rank, n, store)

    def body() -> None:
        if rank == 0:
            dist.send(x, 1, group=g)
        elif rank == 1:
            dist.recv(x, 0, group=g)  # lost: raises here, so stage 1 never sends on to stage 2
            dist.send(x, 2, group=g)
        else:
            with g.paused():  # link 1 -> 2 itself delivers: stage 2 can only learn of the failure
                dist.recv(x, 1, group=g)

    out = _stage_outcome(body, g)
    _dump(out_dir, rank, out)
    # the failed stages stay alive (as a stage blocked elsewhere would): a peer that exits would end
    # stage 2's recv with a connection error, which is not what is tested
    time.sleep(max(0.0, 12.0 - out["seconds"]))
    os._exit(0)


def _stage_outcome(body, g) -> dict:
    """Run ``body()``: how it ended (``raised``, ``type``), after how long (``seconds``; ``failed_at``:
    wall clock, compared across the ranks of one machine), and ``g``'s lost frames."""
    from integration.replay import LinkFailure

    out: dict = {"raised": None, "type": None}
    t0 = time.monotonic()
    try:
        body()
    except LinkFailure as exc:
        out["raised"], out["type"] = str(exc), "LinkFailure"
    except Exception as exc:  # noqa: BLE001 - what the test checks
        out["raised"], out["type"] = f"{type(exc).__name__}: {exc}"[:500], type(exc).__name__
    out["seconds"] = time.monotonic() - t0
    out["failed_at"] = time.time()
    out["frames_lost"] = g.metrics.total("frames_lost")
    return out


@_dumps_crash
def pipeline_stop_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """Stage 1 loses its own receive 0 -> 1 while its receive from stage 2 is posted; stage 2 stops."""
    from integration.replay import LinkFailure

    g, x = _lossy_chain(rank, n, store)
    out: dict = {"raised": None, "type": None}
    done, waiting = os.path.join(out_dir, "done"), os.path.join(out_dir, "waiting")
    t0 = time.monotonic()
    try:
        if rank == 0:
            dist.send(x, 1, group=g)
        elif rank == 1:
            # 1F1B: the gradient from stage 2 is posted before the activation from stage 0 arrives
            with g.paused():  # link 2 -> 1 delivers: only the loss on 0 -> 1 is this rank's own
                grad = dist.irecv(torch.empty(1 << 16), 2, group=g)
            try:
                dist.recv(x, 0, group=g)  # lost: this rank's own receive puts the group in error
            except LinkFailure as exc:
                out["own"] = str(exc)
            t0 = time.monotonic()
            out["waits_from"] = time.time()
            open(waiting, "w").close()
            grad.wait()  # stage 2 stopped and never sends: must not wait for the 20 s group timeout
        else:
            with g.paused():  # link 1 -> 2 itself delivers: stage 2 learns of the failure by the store
                dist.recv(x, 1, group=g)
    except LinkFailure as exc:
        out["raised"], out["type"] = str(exc), "LinkFailure"
    except Exception as exc:  # noqa: BLE001 - what the test checks
        out["raised"], out["type"] = f"{type(exc).__name__}: {exc}"[:500], type(exc).__name__
    out["seconds"] = time.monotonic() - t0
    out["failed_at"] = time.time()  # wall clock: compared across the ranks (one machine)
    if rank == 2:
        _wait_for_file(waiting, 25.0)
        time.sleep(0.5)  # stage 1 is blocked in its wait when this stage stops
        dist.destroy_process_group()  # as phy802 train ends a run after a LinkFailure
        out["stopped"] = time.time()
    _dump(out_dir, rank, out)
    if rank == 1:
        open(done, "w").close()
    else:
        # stay alive (as a stage blocked elsewhere would): a peer that exits would end stage 1's
        # receive with a connection error, which is not what is tested
        _wait_for_file(done, 28.0)
    os._exit(0)


def _wait_for_file(path: str, limit_s: float) -> None:
    end = time.monotonic() + limit_s
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.05)


@_dumps_crash
def backend_hooks_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """Per-device backends, the coalescing manager with a device, the DDP comm hook, shutdown forwarding."""
    torch.set_num_threads(1)
    from torch.distributed.distributed_c10d import _coalescing_manager
    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.process_group import ddp_comm_hook, register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n)
    out: dict = {}
    register(ReplayConfig(source=SourceConfig(ber=0.0, seed=1, kind="independent")))
    g = dist.new_group(backend="phy802")
    out["get_backend"] = type(g._get_backend(torch.device("cpu"))).__name__
    x = torch.randn(1000, generator=torch.Generator().manual_seed(rank))
    a, b = x.clone(), x.clone()
    dist.all_reduce(a)
    with _coalescing_manager(group=g, device=torch.device("cpu"), async_ops=True) as cm:
        dist.all_reduce(b, group=g)
    cm.wait()
    out["coalesced_equal"] = bool(torch.equal(a, b))

    def train(hook_group, ber):
        register(ReplayConfig(source=SourceConfig(ber=ber, seed=2, kind="independent", fec="bypass")))
        hg = dist.new_group(backend="phy802") if hook_group else None
        torch.manual_seed(0)
        m = DDP(torch.nn.Linear(64, 64), process_group=dist.new_group(backend="gloo"))
        if hg is not None:
            m.register_comm_hook(hg, ddp_comm_hook)
        gen = torch.Generator().manual_seed(10 + rank)
        m(torch.randn(8, 64, generator=gen)).square().sum().backward()
        return torch.cat([p.grad.reshape(-1) for p in m.parameters()]), hg

    plain, _ = train(False, 0.0)
    hooked0, _ = train(True, 0.0)
    noisy, hg = train(True, 1e-3)
    out["hook_ber0_equal"] = bool(torch.equal(plain, hooked0))
    out["hook_noisy_flips"] = hg.metrics.total("errors_injected")
    out["hook_noisy_differs"] = bool(not torch.equal(plain, noisy))
    from _nccl_standin import register_standin

    register(ReplayConfig(inner_backends={"cpu": register_standin()}))
    gf = dist.new_group(backend="phy802")
    gf.shutdown()
    out["shutdown_reached"] = "_shutdown" in gf._inner_by_dev["cpu"].calls
    _dump(out_dir, rank, out)
    dist.barrier()
    dist.destroy_process_group()


@_dumps_crash
def fsdp_hooks_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """FSDP2 over a plain gloo group with the phy802 all-gather / reduce-scatter hooks."""
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    from integration.fsdp_hooks import install_fsdp_hooks
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n)
    g_plain = dist.new_group(backend="gloo")
    groups = {}
    for name, ber in (("clean", 0.0), ("noisy", 3e-4)):
        register(ReplayConfig(source=SourceConfig(ber=ber, seed=4, kind="independent", fec="bypass"),
                              classes=("gradients", "params")))
        groups[name] = dist.new_group(backend="phy802")
    mesh = DeviceMesh.from_group(g_plain, device_type="cpu")

    def build():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
        fully_shard(m[0], mesh=mesh)
        fully_shard(m[2], mesh=mesh)
        fully_shard(m, mesh=mesh)
        return m

    out: dict = {}
    models = {"plain": build(), "clean": build(), "noisy": build()}
    out["hooked"] = {k: install_fsdp_hooks(models[k], groups[k]) for k in ("clean", "noisy")}
    for name, m in models.items():
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(10 + rank)
        for _ in range(2):
            x = torch.randn(16, 32, generator=gen)
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    full = {k: [p.full_tensor().detach().clone() for p in m.parameters()] for k, m in models.items()}
    out["clean_identical"] = all(torch.equal(a, b) for a, b in zip(full["plain"], full["clean"]))
    out["noisy_differs"] = not all(torch.equal(a, b) for a, b in zip(full["plain"], full["noisy"]))
    for k in ("clean", "noisy"):
        m = groups[k].metrics
        out[k] = {"messages": dict(m.messages), "flips": dict(m.errors_injected),
                  "ops": sorted({r[1] for r in groups[k].log.messages})}
    try:  # a phy802 group of other ranks than FSDP's is refused with a clear error
        from integration.fsdp_hooks import ReplayAllGather

        ReplayAllGather(g_plain)
        out["refused_plain"] = False
    except ValueError as exc:
        out["refused_plain"] = str(exc)
    _dump(out_dir, rank, out)
    dist.barrier()
    dist.destroy_process_group()


@_dumps_crash
def pipeline_schedule_worker(rank: int, n: int, store: str, inner: str, out_dir: str) -> None:
    """GPipe and 1F1B (torch.distributed.pipelining), DDP and FSDP2 over the wrapper whose CPU inner is ``inner``:
    the gradients each stage ends with, and what the NCCL stand-in saw (deadlocks, host syncs)."""
    torch.set_num_threads(1)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from _nccl_standin import NcclStandIn, register_standin
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=30))
    register_standin()
    out: dict = {}
    for name, sched_cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        register(ReplayConfig(source=SourceConfig(ber=1e-4, seed=3, kind="independent", fec="bypass"),
                              inner_backends={"cpu": inner}, summary=False))
        g = dist.new_group(backend="phy802", timeout=timedelta(seconds=8))
        torch.manual_seed(0)
        full = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256),
                                   torch.nn.Tanh())
        mod = full[2 * rank:2 * rank + 2]
        x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
        stage = PipelineStage(mod, rank, n, torch.device("cpu"), group=g)
        sched = sched_cls(stage, n_microbatches=4, loss_fn=lambda y, t: (y - t).square().mean())
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=torch.zeros(8, 256), losses=[])
        sts = [b for b in g._inners() if isinstance(b, NcclStandIn)]
        out[name] = {"grads": [p.grad.view(torch.int32).sum().item() for p in mod.parameters()],
                     "flips": g.metrics.total("errors_injected"),
                     "deadlocks": [d for b in sts for d in b.deadlocks],
                     "host_syncs": [h for b in sts for h in b.host_syncs], "standins": len(sts)}
    # DDP and FSDP2 (fully_shard) over the same kind of group
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    for name in ("ddp", "fsdp"):
        register(ReplayConfig(source=SourceConfig(ber=1e-4, seed=4, kind="independent", fec="bypass"),
                              classes=("gradients", "params"), inner_backends={"cpu": inner}, summary=False))
        g = dist.new_group(backend="phy802", timeout=timedelta(seconds=8))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256))
        if name == "ddp":
            model = DistributedDataParallel(model, process_group=g)
        else:
            mesh = DeviceMesh.from_group(g, device_type="cpu")
            fully_shard(model[0], mesh=mesh)
            fully_shard(model, mesh=mesh)
        for step in range(2):
            xb = torch.randn(8, 256, generator=torch.Generator().manual_seed(10 * step + rank))
            model(xb).square().mean().backward()
        grads = [(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad) for p in model.parameters()]
        sts = [b for b in g._inners() if isinstance(b, NcclStandIn)]
        out[name] = {"grads": [gr.contiguous().view(torch.int32).sum().item() for gr in grads],
                     "flips": g.metrics.total("errors_injected"),
                     "deadlocks": [d for b in sts for d in b.deadlocks],
                     "host_syncs": [h for b in sts for h in b.host_syncs], "standins": len(sts)}
    _dump(out_dir, rank, out)
    dist.barrier()
    dist.destroy_process_group()


@_dumps_crash
def pipeline_hooks_worker(rank: int, n: int, store: str, out_dir: str) -> None:
    """GPipe and 1F1B, one step each: a plain ``PipelineStage`` on a gloo group, and ``ReplayStage`` on
    the same kind of group replaying a phy802 group at BER 0 and at BER 1e-3: each stage's gradients
    (as int32 sums of their bits) and the flips per class; and what ``ReplayStage`` says of a bad group."""
    torch.set_num_threads(1)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from integration.pp_hooks import ReplayStage
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=30))
    out: dict = {}
    for sched_name, sched_cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        for variant, ber in (("plain", None), ("ber0", 0.0), ("noisy", 1e-3)):
            stock = dist.new_group(backend="gloo", timeout=timedelta(seconds=20))
            torch.manual_seed(0)
            full = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                       torch.nn.Tanh())
            mod = full[2 * rank:2 * rank + 2]
            if ber is None:
                stage = PipelineStage(mod, rank, n, torch.device("cpu"), group=stock)
                g = None
            else:
                register(ReplayConfig(source=SourceConfig(ber=ber, seed=3, kind="independent", fec="bypass"),
                                      summary=False))
                g = dist.new_group(backend="phy802", timeout=timedelta(seconds=20))
                stage = ReplayStage(mod, rank, n, torch.device("cpu"), group=stock, replay_group=g)
            sched = sched_cls(stage, n_microbatches=4, loss_fn=lambda y, t: (y - t).square().mean())
            x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
            if rank == 0:
                sched.step(x)
            else:
                sched.step(target=torch.zeros(8, 64), losses=[])
            out[f"{sched_name}/{variant}"] = {
                "grads": [p.grad.view(torch.int32).sum().item() for p in mod.parameters()],
                "flips": dict(g.metrics.errors_injected) if g is not None else {},
                "bits": dict(g.metrics.payload_bits) if g is not None else {}}
    try:
        ReplayStage(torch.nn.Linear(4, 4), rank, n, torch.device("cpu"), group=stock, replay_group=stock)
    except ValueError as exc:
        out["refused"] = str(exc)
    _dump(out_dir, rank, out)
    dist.barrier()
    dist.destroy_process_group()


@_dumps_crash
def pipeline_hooks_loss_worker(rank: int, n: int, store: str, schedule: str, out_dir: str) -> None:
    """An ``n``-stage ``ReplayStage`` pipeline on a stock gloo group (group timeout 20 s) whose first
    activation 0 -> 1 is lost (ieee at stream BER 1e-2): how long each stage takes to fail, and with what."""
    torch.set_num_threads(1)
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    from integration.pp_hooks import ReplayStage
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    timeout = timedelta(seconds=20)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    register(ReplayConfig(source=SourceConfig(ber=1e-2, seed=3, kind="independent", fec="ieee"), summary=False))
    g = dist.new_group(backend="phy802", timeout=timeout)
    stock = dist.new_group(backend="gloo", timeout=timeout)
    torch.manual_seed(0)
    mod = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Tanh())
    stage = ReplayStage(mod, rank, n, torch.device("cpu"), group=stock, replay_group=g)
    sched = (ScheduleGPipe if schedule == "gpipe" else Schedule1F1B)(
        stage, n_microbatches=4, loss_fn=lambda y, t: (y - t).square().mean())
    x = torch.randn(16, 1024, generator=torch.Generator().manual_seed(1))  # 16 KiB per microbatch
    dist.barrier()

    def body() -> None:
        # the links from stage 1 on deliver: stages 2.. take no part in the failed link 0 -> 1
        with g.paused() if rank >= 2 else contextlib.nullcontext():
            if rank == 0:
                sched.step(x)
            else:
                sched.step(target=torch.zeros(16, 1024), losses=[])

    out = _stage_outcome(body, g)
    g.mark_stopped()  # as phy802 train does after a LinkFailure
    _dump(out_dir, rank, out)
    # the stages stay alive until every stage has reported (as phy802 train's gather over the default
    # group keeps them): a peer that exits would end a receive with a connection error, not what is tested
    end = time.monotonic() + 40.0
    while time.monotonic() < end and not all(os.path.exists(os.path.join(out_dir, f"rank{r}.json")) for r in range(n)):
        time.sleep(0.05)
    os._exit(0)
