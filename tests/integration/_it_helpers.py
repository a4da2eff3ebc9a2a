"""Per-rank bodies for the torch.distributed tests (importable by spawned processes)."""

from __future__ import annotations

import json
import os
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

ALL_FLOAT = ("gradients", "activations", "activation_grads", "params")
_ROOT: list[str] = []


def _scratch(prefix: str) -> str:
    """A folder under one per-process root that is removed when the test process exits."""
    if not _ROOT:
        import atexit
        import shutil

        _ROOT.append(tempfile.mkdtemp(prefix="phy802-it-"))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return tempfile.mkdtemp(prefix=prefix, dir=_ROOT[0])


def spawn(fn, n: int, *args, timeout_s: float = 120.0) -> str:
    """Run ``fn(rank, n, store, *args, out_dir)`` on ``n`` spawned ranks; return ``out_dir``."""
    import torch.multiprocessing as mp

    out_dir = _scratch("out-")
    store = os.path.join(_scratch("store-"), "s")
    ctx = mp.start_processes(fn, args=(n, store, *args, out_dir), nprocs=n, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError(f"ranks did not finish within {timeout_s} s (hang)")
    return out_dir


def load_ranks(out_dir: str, n: int) -> list[dict]:
    res = []
    for r in range(n):
        with open(os.path.join(out_dir, f"rank{r}.json")) as fh:
            res.append(json.load(fh))
    return res



def _inputs(rank: int, n: int, size: int):
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(size, generator=g)


def pg_worker(rank: int, n: int, store: str, mode: str, ber: float, seed: int, out_dir: str) -> None:
    try:
        _pg_worker(rank, n, store, mode, ber, seed, out_dir)
    except BaseException:
        with open(os.path.join(out_dir, f"error{rank}.txt"), "w") as fh:
            fh.write(traceback.format_exc())
        raise


def _pg_worker(rank, n, store, mode, ber, seed, out_dir):
    torch.set_num_threads(1)
    from integration.process_group import UnsupportedOperation, register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    register(ReplayConfig(source=SourceConfig(ber=ber, seed=seed, kind="independent"), mode=mode, classes=ALL_FLOAT))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n)
    g = dist.new_group(backend="phy802")
    assert g.getBackendName() == "phy802"
    out: dict = {"eq": {}, "unsupported": {}}
    size = 3 * 1001
    x = _inputs(rank, n, size)

    def both(name, fn):
        a = fn(None)
        b = fn(g)
        out["eq"][name] = bool(all(torch.equal(u, v) for u, v in zip(a, b)))
        return a, b

    def ar(grp):
        t = x.clone()
        dist.all_reduce(t, group=grp)
        return [t]

    ar_plain, ar_wrap = both("allreduce", ar)

    def bc(grp):
        t = x.clone()
        dist.broadcast(t, src=1, group=grp)
        return [t]

    both("broadcast", bc)

    def ag(grp):
        o = [torch.zeros(size) for _ in range(n)]
        dist.all_gather(o, x, group=grp)
        return o

    both("allgather", ag)

    def ags(grp):
        o = torch.zeros(n * size)
        dist.all_gather_single(o, x, group=grp)
        return [o]

    both("all_gather_single", ags)

    def rs(grp):
        o = torch.zeros(size)
        dist.reduce_scatter(o, [x * (j + 1) for j in range(n)], group=grp)
        return [o]

    both("reduce_scatter", rs)

    def rss(grp):
        o = torch.zeros(size)
        dist.reduce_scatter_single(o, torch.cat([x * (j + 1) for j in range(n)]), group=grp)
        return [o]

    both("reduce_scatter_single", rss)

    def a2a(grp):
        o = [torch.zeros(7) for _ in range(n)]
        dist.all_to_all(o, [x[:7] + j for j in range(n)], group=grp)
        return o

    both("all_to_all", a2a)

    def a2as(grp):
        o = torch.zeros(n * 5)
        dist.all_to_all_single(o, x[: n * 5].clone(), group=grp)
        return [o]

    both("all_to_all_single", a2as)
    dist.barrier(group=g)

    # point to point around the ring; the sender's buffer must be untouched
    send = x[:999].clone()
    keep = send.clone()
    recv = torch.zeros(999)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    reqs = [dist.isend(send, nxt, group=g), dist.irecv(recv, prv, group=g)]
    for r in reqs:
        r.wait()
    out["sender_untouched"] = bool(torch.equal(send, keep))
    out["recv_clean"] = bool(torch.equal(recv, _inputs(prv, n, size)[:999]))
    ints = torch.arange(50) + rank
    dist.all_reduce(ints, group=g)
    out["ints_clean"] = bool(torch.equal(ints, sum(torch.arange(50) + r for r in range(n))))

    for name, fn in (("reduce", lambda: dist.reduce(x.clone(), 0, group=g)),
                     ("gather", lambda: dist.gather(x.clone(), [torch.zeros(size) for _ in range(n)] if rank == 0 else None, 0, group=g)),
                     ("scatter", lambda: dist.scatter(torch.zeros(size), [x.clone() for _ in range(n)] if rank == 0 else None, 0, group=g))):
        try:
            fn()
            out["unsupported"][name] = "no error"
        except UnsupportedOperation as exc:
            out["unsupported"][name] = str(exc)

    # replicas after the (possibly corrupted) allreduce, for the ring RS/AG check
    allw = [torch.zeros(size) for _ in range(n)]
    dist.all_gather(allw, ar_wrap[0])
    if rank == 0:
        torch.save({"replicas": torch.stack(allw), "clean": ar_plain[0]}, os.path.join(out_dir, "allreduce.pt"))
    out["records"] = g.log.records()
    out["messages"] = g.log.messages
    out["metrics"] = g.metrics.to_dict()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


def spawn_tolerant(fn, n: int, *args, timeout_s: float = 120.0) -> str:
    """Like :func:`spawn`, but ranks may die (a killed peer is the point of the test); waits for rank 0."""
    import torch.multiprocessing as mp

    out_dir = _scratch("out-")
    store = os.path.join(_scratch("store-"), "s")
    ctx = mp.start_processes(fn, args=(n, store, *args, out_dir), nprocs=n, join=False, start_method="spawn")
    p0 = ctx.processes[0]
    p0.join(timeout_s)
    alive = p0.is_alive()
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
        p.join(5)
    if alive:
        raise AssertionError(f"rank 0 did not finish within {timeout_s} s (hang)")
    return out_dir


def dead_peer_worker(rank: int, n: int, store: str, mode: str, ber: float, out_dir: str) -> None:
    """Rank 1 dies (SIGKILL) after one all-reduce; rank 0 keeps calling all_reduce on the phy802 group."""
    import signal
    from datetime import timedelta

    torch.set_num_threads(1)
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    register(ReplayConfig(source=SourceConfig(ber=ber, seed=1, kind="independent"), mode=mode,
                          guard="nan_to_zero_clamp"))
    timeout = timedelta(seconds=5)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n, timeout=timeout)
    g = dist.new_group(backend="phy802", timeout=timeout)
    t = torch.ones(4096)
    dist.all_reduce(t, group=g)
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    out = {"calls": 0, "raised": None, "seconds": None, "stale_results": 0}
    t0 = time.monotonic()
    try:
        for _ in range(2000):
            t = torch.ones(4096)
            dist.all_reduce(t, group=g)
            out["calls"] += 1
            if torch.equal(t, torch.ones(4096)):
                out["stale_results"] += 1
            if time.monotonic() - t0 > 30:
                break
    except Exception as exc:  # noqa: BLE001 - what the test checks
        out["raised"] = f"{type(exc).__name__}: {exc}"[:300]
    out["seconds"] = time.monotonic() - t0
    with open(os.path.join(out_dir, "rank0.json"), "w") as fh:
        json.dump(out, fh)
    os._exit(0)


def noncontig_worker(rank: int, n: int, store: str, mode: str, ber: float, out_dir: str) -> None:
    """Ops on non-contiguous tensors: the wrapper's result differs from gloo's exactly at the logged flips."""
    torch.set_num_threads(1)
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    register(ReplayConfig(source=SourceConfig(ber=ber, seed=2, kind="independent"), mode=mode, classes=ALL_FLOAT))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=n)
    g = dist.new_group(backend="phy802")
    x = _inputs(rank, n, 64 * 96).view(64, 96)
    res: dict = {}

    def check(name, fn):
        before = len(g.log.records())
        a = fn(None)
        b = fn(g)
        recs = g.log.records()[before:]
        diff = set(torch.nonzero((a.contiguous().view(-1).view(torch.int32)
                                  != b.contiguous().view(-1).view(torch.int32))).flatten().tolist())
        res[name] = {"noncontig": not b.is_contiguous() or (name == "send_recv" and rank == 0), "diff": sorted(diff),
                     "logged": sorted({r["element"] for r in recs}), "n_logged": len(recs)}

    # the reference (plain gloo) gets contiguous copies: gloo refuses non-contiguous send/recv and
    # its CPU allreduce of a non-contiguous tensor silently reduces the wrong elements (torch 2.13)
    def ar(grp):
        fix = (lambda u: u.contiguous()) if grp is None else (lambda u: u)
        t = fix(x.clone()[:, ::2])
        dist.all_reduce(t, group=grp)
        return t

    def bc(grp):
        fix = (lambda u: u.contiguous()) if grp is None else (lambda u: u)
        t = fix(x.clone().t())
        dist.broadcast(t, src=1, group=grp)
        return t

    def p2p(grp):
        fix = (lambda u: u.contiguous()) if grp is None else (lambda u: u)
        if rank == 0:
            dist.send(fix(x.clone().t()), 1, group=grp)
            return torch.zeros(96, 64).t()
        t = fix(torch.zeros(64, 96).t())
        dist.recv(t, 0, group=grp)
        return t

    for name, fn in (("allreduce", ar), ("broadcast", bc), ("send_recv", p2p)):
        check(name, fn)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(res, fh)
    dist.barrier()
    dist.destroy_process_group()


def trap_host_methods(monkeypatch) -> list[str]:
    """Record every call of the tensor-to-host methods (``integration.host_sync.HOST_METHODS``:
    ``.item()``, ``.cpu()``, ``.numpy()``, ``float(t)``, ...) until ``monkeypatch.undo()``; returns
    the list the names are appended to. On CPU tensors these do not dispatch, so the dispatch-level
    detector cannot see them."""
    from integration.host_sync import HOST_METHODS

    calls: list[str] = []

    def trap(name):
        orig = getattr(torch.Tensor, name)

        def f(self, *a, **k):
            calls.append(name)
            return orig(self, *a, **k)
        return f

    for name in HOST_METHODS:
        monkeypatch.setattr(torch.Tensor, name, trap(name))
    return calls
