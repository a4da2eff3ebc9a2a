"""The wrapper's NCCL code path against a stand-in that behaves like NCCL (``_nccl_standin.py``).

Ranks are threads of this process, each with its own ``ReplayProcessGroup`` on one shared store:
the stand-in's streams, blocking sends and late-landing data are real threads, so what NCCL's
contract breaks shows here as a crash, a deadlock report, a host-sync record or wrong bytes.
The oracle of every op is the same op through the gloo inner (whose futures complete when the data
has landed), with the same seeds: outputs, flips logged and counters must be identical.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

_C = torch._C._distributed_c10d  # the options types (not all are re-exported by torch.distributed)

from _nccl_standin import (
    STRICT_NAME,
    NcclStandIn,
    StandInDeadlock,
    StandInHostSync,
    backend_signatures,
    check_call,
    register_standin,
    register_strict,
)

from integration.process_group import ReplayProcessGroup, UnsupportedOperation
from integration.replay import LinkFailure, ReplayConfig
from integration.sources import SourceConfig

ALL = ("gradients", "activations", "activation_grads", "params")
STANDIN = register_standin()
register_strict()
# groups stay alive until the test process ends: the last reference to a group dropped on one of
# gloo's own threads (a completion callback holds the group) would make gloo join that thread itself
_KEEP: list = []


class CountingStore(dist.Store):
    """A HashStore that counts the replay group's look-ups of its failure keys (``phy802_qp_error``)."""

    def __init__(self) -> None:
        super().__init__()
        self._s = dist.HashStore()
        self.lookups = 0

    def _count(self, keys) -> None:
        if any("phy802_qp_error" in k for k in keys):
            self.lookups += 1

    def set(self, key, value):
        return self._s.set(key, value)

    def get(self, key):
        self._count([key])
        return self._s.get(key)

    def check(self, keys):
        self._count(keys)
        return self._s.check(keys)

    def wait(self, keys, timeout=None):
        return self._s.wait(keys) if timeout is None else self._s.wait(keys, timeout)

    def add(self, key, value):
        return self._s.add(key, value)

    def compare_set(self, key, expected, desired):
        return self._s.compare_set(key, expected, desired)

    def delete_key(self, key):
        return self._s.delete_key(key)

    def num_keys(self):
        return self._s.num_keys()


def config(inner: str, ber: float = 1e-3, mode: str = "endpoint", fec: str = "bypass", **kw) -> ReplayConfig:
    return ReplayConfig(source=SourceConfig(ber=ber, seed=5, kind="independent", fec=fec), mode=mode, classes=ALL,
                        inner_backends={"cpu": inner}, summary=False, **kw)


def run_ranks(body, cfg: ReplayConfig, n: int = 2, timeout_s: float = 20.0, store=None) -> list:
    """``body(group, rank)`` on ``n`` thread ranks; returns their results (re-raises the first error)."""
    store = store if store is not None else dist.HashStore()
    out: list = [None] * n
    errs: list = [None] * n
    groups: list = [None] * n
    _KEEP.append(groups)

    def run(r: int) -> None:
        try:
            g = groups[r] = ReplayProcessGroup(dist.PrefixStore("grp", store), r, n, timedelta(seconds=timeout_s), cfg)
            out[r] = body(g, r)
        except BaseException as exc:  # noqa: BLE001 - re-raised below on the test's thread
            errs[r] = exc

    ths = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(4 * timeout_s)
        assert not t.is_alive(), "a rank hung"
    for g in groups:
        if g is not None:
            for b in standins(g):
                b.abort()  # ends its stream thread
    for e in errs:
        if e is not None:
            raise e
    return out


def standins(g: ReplayProcessGroup) -> list[NcclStandIn]:
    return [b for b in g._inners() if isinstance(b, NcclStandIn)]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (a flipped exponent can make NaN, which torch.equal calls unequal to itself)."""
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _sync_opts(kind):
    o = kind()
    o.asyncOp = False  # what dist.all_reduce(t) etc. set without async_op=True (distributed_c10d.py)
    return o


# ---------------------------------------------------------------------------------------------- every op
F8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
DTYPES = (torch.float32, torch.bfloat16, torch.float16) + F8


def _data(rank: int, k: int, n: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * rank + k)
    return torch.randn(n, generator=g).to(dtype)


def _every_op(g: ReplayProcessGroup, r: int, sync: bool, dtypes=DTYPES) -> dict:
    """Each op the wrapper offers, each dtype, through ``g``: the outputs (as bytes) by case name, and the
    flips logged per dtype."""
    n, size = g.size(), 1200
    res: dict = {}
    flips: dict = {}

    def done(work) -> None:
        if work is not None:
            work.wait()

    def o(kind):
        return _sync_opts(kind) if sync else kind()

    # FSDP2's uint8 all-gather of mixed-dtype parameters
    out = torch.empty(n * 4000, dtype=torch.uint8)
    inp = (_data(r, 999, 1000, torch.float32)).view(torch.uint8)
    done(g.all_gather_single(out, inp, o(_C.AllgatherOptions)))
    res["all_gather_single uint8"] = out
    done(g.barrier(o(_C.BarrierOptions)))
    for dtype in dtypes:
        d = str(dtype).split(".")[1]
        before = len(g.log)
        reducible = dtype not in F8 and not (g.config.mode == "ring" and dtype in F8)
        k = 0

        def x(m=size):
            nonlocal k
            k += 1
            return _data(r, k, m, dtype)

        if reducible:
            t = x()
            done(g.allreduce([t], o(_C.AllreduceOptions)))
            res[f"allreduce {d}"] = t
            out = torch.empty(size // n, dtype=dtype)
            done(g.reduce_scatter_single(out, x(), o(_C.ReduceScatterOptions)))
            res[f"reduce_scatter_single {d}"] = out
            outs = [torch.empty(size // n, dtype=dtype)]
            done(g.reduce_scatter(outs, [[x(size // n) for _ in range(n)]], o(_C.ReduceScatterOptions)))
            res[f"reduce_scatter {d}"] = outs[0]
            t = x()
            ro = o(_C.ReduceOptions)
            ro.rootRank = 1
            done(g.reduce([t], ro))
            res[f"reduce {d}"] = t
        t = x()
        bo = o(_C.BroadcastOptions)
        bo.rootRank = 0
        done(g.broadcast([t], bo))
        res[f"broadcast {d}"] = t
        outs = [torch.empty(size, dtype=dtype) for _ in range(n)]
        done(g.allgather([outs], [x()], o(_C.AllgatherOptions)))
        res[f"allgather {d}"] = torch.cat(outs)
        out = torch.empty(n * size, dtype=dtype)
        done(g.all_gather_single(out, x(), o(_C.AllgatherOptions)))
        res[f"all_gather_single {d}"] = out
        outs = [torch.empty(size, dtype=dtype) for _ in range(n)]
        done(g.alltoall(outs, [x() for _ in range(n)], o(_C.AllToAllOptions)))
        res[f"alltoall {d}"] = torch.cat(outs)
        out = torch.empty(n * size, dtype=dtype)
        done(g.all_to_all_single(out, x(n * size), [], [], o(_C.AllToAllOptions)))
        res[f"all_to_all_single {d}"] = out
        gathered = [torch.empty(size, dtype=dtype) for _ in range(n)] if r == 0 else []
        go = o(_C.GatherOptions)
        go.rootRank = 0
        done(g.gather([gathered] if r == 0 else [], [x()], go))
        if r == 0:
            res[f"gather {d}"] = torch.cat(gathered)
        out = torch.empty(size, dtype=dtype)
        so = o(_C.ScatterOptions)
        so.rootRank = 1
        done(g.scatter([out], [[x() for _ in range(n)]] if r == 1 else [], so))
        res[f"scatter {d}"] = out
        # send/recv: rank 0 -> 1, then 1 -> 0 (forward activation, then its gradient)
        t = x()
        if r == 0:
            g.send([t], 1, 0).wait()
            back = torch.empty(size, dtype=dtype)
            g.recv([back], 1, 0).wait()
            res[f"recv back {d}"] = back
        else:
            fwd = torch.empty(size, dtype=dtype)
            g.recv([fwd], 0, 0).wait()
            g.send([t], 0, 0).wait()
            res[f"recv fwd {d}"] = fwd
        # coalesced forms (torch's _coalescing_manager: _start_coalescing, ops, _end_coalescing)
        outs2 = [torch.empty(n * size, dtype=dtype) for _ in range(2)]
        ins2 = [x(), x()]
        g._start_coalescing(torch.device("cpu"))
        for oo, ii in zip(outs2, ins2):
            g.all_gather_single(oo, ii, o(_C.AllgatherOptions))
        if reducible:
            ts = [x(), x()]
            for tt in ts:
                g.allreduce([tt], o(_C.AllreduceOptions))
        done(g._end_coalescing(torch.device("cpu")))
        res[f"coalesced all_gather_single {d}"] = torch.cat(outs2)
        if reducible:
            res[f"coalesced allreduce {d}"] = torch.cat(ts)
        flips[d] = len(g.log) - before
    return {"flips_by_dtype": flips,"bytes": {kk: v.view(torch.uint8).clone() for kk, v in res.items()},
            "log": g.log.records(), "flips": g.metrics.total("errors_injected"),
            "syncs": [s for b in standins(g) for s in b.host_syncs],
            "deadlocks": [s for b in standins(g) for s in b.deadlocks],
            "early": [s for b in standins(g) for s in b.early_waits]}


def _order(rec: dict) -> tuple:
    return rec["seq"], rec["msg_bit"]


@pytest.mark.parametrize("mode", ["endpoint", "ring"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_every_op_dtype_and_mode_through_the_nccl_path_matches_gloo(mode, sync):
    """Each collective, p2p op, dtype and mode, synchronous and asynchronous, through the stand-in:
    the same bytes, flips and log as through gloo; no host sync, no deadlock."""
    gloo_types = tuple(d for d in DTYPES if d not in F8)  # gloo has no float8 type: float8 comes last
    ref = run_ranks(lambda g, r: _every_op(g, r, sync, gloo_types), config("gloo", mode=mode))
    got = run_ranks(lambda g, r: _every_op(g, r, sync), config(STANDIN, mode=mode))
    clean = run_ranks(lambda g, r: _every_op(g, r, sync), config(STANDIN, mode=mode, ber=0.0))
    for r in range(2):
        assert got[r]["syncs"] == [] and got[r]["deadlocks"] == [] and got[r]["early"] == []
        for case, b in ref[r]["bytes"].items():
            assert torch.equal(got[r]["bytes"][case], b), (r, case)
        # gloo completes on its own threads, so its log is in completion order: compared sorted (repr: NaN == NaN)
        nref = len(ref[r]["log"])
        assert repr(sorted(got[r]["log"], key=_order)[:nref]) == repr(sorted(ref[r]["log"], key=_order))
        # float8 (no gloo oracle): each logged flip changed exactly one bit of what was delivered
        for f8 in F8:
            d = str(f8).split(".")[1]
            bits = sum(int(np.unpackbits((v ^ clean[r]["bytes"][k]).numpy()).sum())
                       for k, v in got[r]["bytes"].items() if k.endswith(" " + d))
            assert bits == got[r]["flips_by_dtype"][d] > 0, (r, d)
    assert sum(x["flips"] for x in ref) > 100  # the oracle's run was corrupted: a comparison, not a no-op


# ---------------------------------------------------------------------------------------------- defects
def test_a_synchronous_collective_gets_no_work_from_nccl_and_still_completes():
    """dist.all_reduce(t) sets opts.asyncOp = False; NCCL then returns no Work. The wrapper called
    get_future() on it (AttributeError on the first dist.all_reduce(loss) of a script)."""
    def body(g, r):
        t = _data(r, 1, 4096, torch.float32)
        w = g.allreduce([t], _sync_opts(_C.AllreduceOptions))
        if w is not None:
            w.wait()
        return t, g.metrics.total("errors_injected")

    got = run_ranks(body, config(STANDIN))
    ref = run_ranks(body, config("gloo"))
    assert ref[0][1] + ref[1][1] > 0
    for (a, _), (b, _) in zip(got, ref):
        assert same(a, b)


def test_one_f_one_b_mixed_batches_neither_deadlock_nor_sync_the_host():
    """1F1B's steady state: stage 0 issues [send fwd, recv bwd], stage 1 [send bwd, recv fwd], one op at a
    time (batch_isend_irecv does not coalesce for a Python group), then waits on both. On one NCCL stream
    both sends wait for a recv queued behind the other's send."""
    def body(g, r):
        peer = 1 - r
        for mb in range(3):
            out = _data(r, mb, 1 << 14, torch.float32)
            inp = torch.empty(1 << 14)
            works = [g.send([out], peer, 0), g.recv([inp], peer, 0)]
            for w in works:
                w.wait()
        return ([s for b in standins(g) for s in b.deadlocks], [s for b in standins(g) for s in b.host_syncs])

    res = run_ranks(body, config(STANDIN, ber=1e-4), timeout_s=3.0)
    for deadlocks, syncs in res:
        assert deadlocks == [] and syncs == []


def test_the_standin_reports_two_first_sends_on_one_stream_as_a_deadlock():
    """The stand-in's own check: what the wrapper must avoid is reported, not hung on."""
    def body(s, r):
        peer = 1 - r
        w = s.send([torch.ones(8)], peer, 0)
        s.recv([torch.empty(8)], peer, 0)
        with pytest.raises(StandInDeadlock, match=f"rank {r}'s stream is blocked in send #1 to rank {peer}"):
            w.wait()
        return True

    store = dist.HashStore()
    out = [None, None]

    def run(r):
        out[r] = body(NcclStandIn(store, r, 2, timedelta(seconds=1)), r)

    ths = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(10)
    assert out == [True, True]


def test_failure_agreement_without_a_store_lookup_per_op():
    """NCCL's completion says nothing about the peers: no look-up per op while nothing is lost (the
    wrapper looked the store up at every op's completion, before the peers had issued it), and every
    rank names the same collective when a frame is lost."""
    store = CountingStore()

    def clean(g, r):
        for i in range(6):
            g.allreduce([_data(r, i, 2048, torch.float32)]).wait()
        return g.metrics.total("errors_injected")

    flips = run_ranks(clean, config(STANDIN, ber=1e-4), store=store)
    assert sum(flips) > 0 and store.lookups == 0

    def lossy(g, r):
        raised = []
        for i in range(8):
            try:
                g.allreduce([_data(r, i, 20000, torch.float32)]).wait()
            except LinkFailure:
                raised.append(i)
        with pytest.raises(LinkFailure):
            g.check_failures()
        return raised, g._failed_at

    # seed 6: only rank 1's link loses a frame (collective 2); seed 5 at 4e-7: rank 1 at 3, rank 0 at 4
    for ber, seed, first in ((1e-7, 6, [None, 2]), (4e-7, 5, [4, 3])):
        cfg = config(STANDIN, ber=ber, fec="ieee", retry_cnt=0)
        cfg = dataclasses.replace(cfg, source=dataclasses.replace(cfg.source, seed=seed))
        res = run_ranks(lossy, cfg)
        assert [r[0][0] if r[0] else None for r in res] == first  # a rank raises at its own first loss
        assert [r[1] for r in res] == [min(f for f in first if f is not None)] * 2  # all agree on the first


def test_cuda_graph_capture_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    g = ReplayProcessGroup.standalone(config("gloo"), 0, 2)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(UnsupportedOperation, match="allreduce during CUDA graph capture is refused"):
        g.allreduce([torch.ones(16)])


def test_coalesced_ops_apply_their_flips_after_the_group_lands():
    """NCCL writes a coalesced group's outputs when the group ends: flips applied before are overwritten
    (all-gather), or summed in as this rank's input (in-place all-reduce)."""
    def body(g, r):
        outs = [torch.empty(2 * 4096) for _ in range(2)]
        ts = [_data(r, 7, 4096, torch.float32), _data(r, 8, 4096, torch.float32)]
        clean_ts = [t.clone() for t in ts]
        g._start_coalescing(torch.device("cpu"))
        for k, o in enumerate(outs):
            g.all_gather_single(o, _data(r, k, 4096, torch.float32))
        for t in ts:
            g.allreduce([t])
        g._end_coalescing(torch.device("cpu")).wait()
        return outs, ts, clean_ts, g.metrics.total("errors_injected")

    got = run_ranks(body, config(STANDIN, ber=3e-4))
    ref = run_ranks(body, config("gloo", ber=3e-4))
    for (go, gt, _, gf), (ro, rt, _, rf) in zip(got, ref):
        assert gf == rf > 0
        assert all(same(a, b) for a, b in zip(go + gt, ro + rt))


def test_every_device_type_served_has_its_backend_registered_at_construction(monkeypatch):
    """new_group(...) after init_process_group(device_id=cuda:k) asks the new group for its CUDA backend
    before any op; it was registered only when the first CUDA tensor arrived."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = ReplayConfig(inner_backends={"cpu": "gloo", "cuda": "gloo"}, summary=False)
    g = ReplayProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=5), cfg)
    assert g._get_backend(torch.device("cuda")) is not None
    assert g._get_backend(torch.device("cpu")) is not None


# ---------------------------------------------------------------------------------------------- bad input
def test_inner_backends_refused_naming_the_value():
    with pytest.raises(ValueError, match=r"inner_backends\['cpu'\] = 'nosuch': no backend of that name is registered"):
        ReplayProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=5),
                           ReplayConfig(inner_backends={"cpu": "nosuch"}))
    with pytest.raises(ValueError, match=r"inner_backends\['cpu'\] = 'nccl': backend 'nccl' does not serve device type 'cpu'"):
        ReplayProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=5), ReplayConfig(inner_backends={"cpu": "nccl"}))
    from integration.process_group import register

    with pytest.raises(ValueError, match="'nosuch'"):
        register(ReplayConfig(inner_backends={"cpu": "nosuch"}))
    with pytest.raises(ValueError, match="must map device types to backend names"):
        ReplayConfig(inner_backends={"cpu": 3})


# ---------------------------------------------------------------------------------------------- reporting
def test_summary_line_and_iterable_log():
    def body(g, r):
        for i in range(3):
            g.allreduce([_data(r, i, 4096, torch.float32)]).wait()
        return g.summary(), list(g.log), g.log.records(), g.metrics.total("errors_injected")

    for line, it, recs, flips in run_ranks(body, config(STANDIN, ber=1e-3)):
        assert repr(it) == repr(recs) and len(recs) == flips > 0
        assert "\n" not in line and f"{flips} flips injected" in line and f"inner cpu: {STANDIN}" in line
        assert "messages received" in line and "BER 0.001" in line


def test_a_summary_that_fails_says_so_at_shutdown(monkeypatch, capsys):
    """The shutdown line is never dropped: a summary that raises prints the rank and the error instead."""
    g = ReplayProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=5), ReplayConfig())

    def broken(self):
        raise KeyError("counters")

    monkeypatch.setattr(ReplayProcessGroup, "summary", broken)
    g.shutdown()
    err = capsys.readouterr().err
    assert "phy802 rank 0/1: summary failed: KeyError: 'counters'" in err


def test_the_shutdown_line_is_one_write_with_its_newline(monkeypatch):
    """Ranks share one stderr pipe: the line and its newline go out in one write (print() wrote the newline
    separately, and another rank's line landed between them)."""
    import sys

    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    g = ReplayProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=5), ReplayConfig())
    monkeypatch.setattr(sys, "stderr", Recorder())
    g.shutdown()
    assert len(writes) == 1 and writes[0].startswith("phy802 rank 0/1 (") and writes[0].endswith("guarded\n")


def test_flips_match_what_was_logged_bit_for_bit():
    """Independent check of the stand-in path: XOR of the delivered and the clean sum has as many bits set as
    flips were logged (endpoint all-reduce: the flips land on the reduced buffer)."""
    def body(g, r):
        t = _data(r, 3, 8192, torch.float32)
        g.allreduce([t]).wait()
        return t, g.metrics.total("errors_injected")

    clean = run_ranks(body, config(STANDIN, ber=0.0))
    noisy = run_ranks(body, config(STANDIN, ber=1e-3))
    for (c, _), (x, f) in zip(clean, noisy):
        diff = (c.view(torch.int32) ^ x.view(torch.int32)).numpy().view(np.uint32)
        assert f > 0 and int(np.unpackbits(diff.view(np.uint8)).sum()) == f


def test_standin_signatures_come_from_the_installed_torch_and_reject_a_device_argument():
    sigs = backend_signatures()
    assert sigs["_start_coalescing"] == [[]] and sigs["_end_coalescing"] == [[]]
    check_call("_start_coalescing", (), {})
    with pytest.raises(TypeError, match="incompatible"):
        check_call("_start_coalescing", (torch.device("cpu"),), {})  # Backend's binding takes no device
    check_call("send", ([torch.ones(1)], 1, 0), {})
    with pytest.raises(TypeError):
        check_call("send", ([torch.ones(1)], 1), {})  # tag is required by the binding
    with pytest.raises(TypeError, match="no method"):
        check_call("_start_coalescing_v2", (), {})


def test_an_isend_is_issued_when_called():
    """A deferred isend (issued at a later wait or collective) left a pipeline stage idle, and an isend
    followed by a barrier on another group deadlocked: the inner send is issued at once."""
    def body(g, r):
        if r == 0:
            w = g.send([torch.ones(8)], 1, 0)
            sent = [c for b in standins(g) for c in b.calls]
            w.wait()
            return sent
        g.recv([torch.empty(8)], 0, 0).wait()
        return None

    assert run_ranks(body, config(STANDIN, ber=0.0))[0] == ["send"]


@pytest.mark.slow  # two spawned 2-process runs of 4 trainings each: 112 s on the shared 2-vCPU machine
def test_pipelines_ddp_and_fsdp2_over_the_nccl_path_neither_deadlock_nor_sync_the_host():
    """torch.distributed.pipelining's GPipe and 1F1B, DDP and FSDP2 over the wrapper, 2 processes: through
    the stand-in the same gradients (and flips) as through gloo, no deadlock report, no host sync."""
    from _it_helpers import load_ranks, spawn
    from _it_wrapper_workers import pipeline_schedule_worker

    got = load_ranks(spawn(pipeline_schedule_worker, 2, STANDIN, timeout_s=120), 2)
    ref = load_ranks(spawn(pipeline_schedule_worker, 2, "gloo", timeout_s=120), 2)
    for g, r in zip(got, ref):
        assert "crash" not in g, g.get("crash")
        for sched in ("gpipe", "1f1b", "ddp", "fsdp"):
            assert g[sched]["standins"] == 3 and g[sched]["deadlocks"] == [] and g[sched]["host_syncs"] == []
            assert g[sched]["grads"] == r[sched]["grads"] and g[sched]["flips"] == r[sched]["flips"]
    for sched in ("gpipe", "1f1b", "ddp", "fsdp"):
        assert sum(x[sched]["flips"] for x in got) > 0, sched



def test_the_strict_standin_raises_at_a_host_sync_and_lets_the_wrapper_s_ops_through():
    """The strict stand-in (the backend plugin of spawned training ranks) makes a host sync an error
    at once: a Work waited on with a timeout raises, as does a wait inside an open coalescing group;
    the wrapper's own ops, which do neither, pass."""
    from datetime import timedelta

    def body(g, r):
        t = _data(r, 1, 4096, torch.float32)
        g.allreduce([t]).wait()  # through the wrapper: stream order, no timeout
        inner = standins(g)[0]
        w = inner.allreduce([torch.ones(4)])
        with pytest.raises(StandInHostSync, match="waited on with a timeout"):
            w.wait(timedelta(seconds=5))
        inner._start_coalescing()
        early = inner.allreduce([torch.ones(4)])
        with pytest.raises(StandInHostSync, match="coalescing group that has not ended"):
            early.wait()
        inner._end_coalescing().wait()
        return len(inner.host_syncs)

    assert run_ranks(body, config(STRICT_NAME)) == [1, 1]


TRAIN_TINY = ["--world-size", "2", "--fec", "bypass", "--source", "independent", "--ber", "1e-4", "--steps", "2",
              "--seed", "1", "--corpus", "stdlib", "--n-layer", "2", "--n-embd", "16", "--n-head", "2",
              "--block-size", "16", "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1",
              "--val-tokens", "64", "--timeout", "150"]


@pytest.mark.slow  # three 2-rank training runs: ~40 s (ddp), ~65 s (fsdp), ~90 s (1f1b) on the shared 2-vCPU machine
@pytest.mark.parametrize("parallel", [["ddp"], ["fsdp"], ["pp", "--schedule", "1f1b"]], ids=lambda p: p[0])
def test_phy802_train_runs_through_the_nccl_path_with_no_host_sync_and_no_deadlock(parallel, tmp_path):
    """``phy802 train`` with the strict stand-in as the inner backend, loaded in every spawned rank as a
    backend plugin: a host sync (StandInHostSync) or a deadlock (StandInDeadlock) would fail a rank and
    the run; it finishes, with flips delivered through the NCCL path."""
    import json

    from phy802.cli import main

    out = tmp_path / "out"
    rc = main(["train", "--parallel", *parallel, *TRAIN_TINY, "--inner-backend", f"cpu={STRICT_NAME}",
               "--backend-plugin", "_nccl_standin:register_strict", "--out", str(out), "--json"])
    with open(out / "result.json", encoding="utf-8") as fh:
        res = json.load(fh)
    assert rc == 0 and res["failed"] is False
    assert res["config"]["replay"]["inner_backends"]["cpu"] == STRICT_NAME
    assert res["config"]["backend_plugins"] == ["_nccl_standin:register_strict"]
    assert sum(res["metrics"]["errors_injected"].values()) > 0


@pytest.mark.parametrize("opts, said", [
    (["--inner-backend", "cpu=nosuch"], "inner_backends['cpu'] = 'nosuch': no backend of that name is registered"),
    (["--inner-backend", "nosuch"], "expected DEVICE=NAME"),
    (["--backend-plugin", "no_such_module_x"], "cannot import 'no_such_module_x'"),
    (["--backend-plugin", "_nccl_standin:nofn"], "has no function 'nofn'"),
    (["--plain", "--inner-backend", "cpu=gloo"], "--plain trains without it"),
])
def test_phy802_train_refuses_a_bad_inner_backend_or_plugin_before_starting(opts, said, capsys):
    from phy802.cli import main

    try:
        rc = main(["train", *TRAIN_TINY, *opts])
    except SystemExit as exc:  # argparse's own refusal of a malformed value
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
