"""The replay group is never destroyed on its inner backend's worker thread.

gloo runs a future's completion callbacks on its own worker thread and drops each callback there,
once it gets the GIL (c10's ``Future::markCompleted``, torch's ``PythonFunctionGuard``), which can be
after the caller has returned and dropped the group. A callback that closed over the group then held
its last reference: the group and its inner gloo backend were destroyed on that worker thread, and
``~ProcessGroupGloo`` joined the thread it ran on (``terminate called ... Resource deadlock avoided``
at exit of a torchrun DDP script, about one run in four). These tests hold the callbacks the way gloo
does, past the group, and check that the group goes when its user drops it.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from integration.process_group import ReplayProcessGroup
from integration.replay import LinkFailure, ReplayConfig
from integration.sources import SourceConfig
from integration.works import _RAN_NOT_DROPPED, drain_completions, then_completion


class _Future:
    """An inner future that keeps every callback given to ``then`` (as gloo's thread does until it runs
    and drops it) and completes them only when the test says so."""

    def __init__(self, value) -> None:
        self.value_ = value
        self.callbacks: list = []

    def then(self, cb):
        self.callbacks.append(cb)
        return torch.futures.Future()

    def value(self):
        return self.value_


class _Work:
    def __init__(self, tensors) -> None:
        self.fut = _Future(tensors)

    def get_future(self):
        return self.fut


class _GlooLike:
    """An inner backend named gloo whose works complete only through the recorded callbacks."""

    def __init__(self) -> None:
        self.works: list[_Work] = []

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "gloo"

    def allreduce(self, tensors, opts=None):
        w = _Work(tensors)
        self.works.append(w)
        return w


def _one_lossy_allreduce():
    """A group at BER 1e-2 (frames lost) over :class:`_GlooLike`, one all-reduce issued: the group, the
    inner future and a list holding its completion callback, taken off the future (as gloo's thread holds it)."""
    inner = _GlooLike()
    config = ReplayConfig(source=SourceConfig(ber=1e-2, seed=1, fec="bypass"), summary=False)
    group = ReplayProcessGroup(dist.HashStore(), 0, 2, timedelta(seconds=5), config, inner=inner)
    group.allreduce([torch.ones(4096)], dist.AllreduceOptions())
    fut = inner.works[0].fut
    return group, fut, [fut.callbacks.pop()]


@pytest.mark.parametrize("ber", [1e-2, 1e-9])
def test_a_pending_completion_callback_does_not_keep_the_group_alive(ber):
    inner = _GlooLike()
    config = ReplayConfig(source=SourceConfig(ber=ber, seed=1, fec="bypass"))
    group = ReplayProcessGroup(dist.HashStore(), 0, 2, timedelta(seconds=5), config, inner=inner)
    work = group.allreduce([torch.ones(4096)], dist.AllreduceOptions())
    callbacks = [cb for w in inner.works for cb in w.fut.callbacks]
    assert callbacks, "the all-reduce chained no completion callback on the inner future"
    alive = weakref.ref(group)
    del group, work
    gc.collect()
    # the callbacks still exist (gloo's thread has not dropped them yet): the group must be gone anyway,
    # so that its last reference is dropped by its user's thread, not by gloo's
    assert alive() is None, "a completion callback still holds the replay group"
    # a callback that runs after its group was destroyed says so (into its future) instead of crashing
    with pytest.raises(RuntimeError, match="destroyed before its operation completed"):
        callbacks[0](inner.works[0].fut)


def test_the_helper_refuses_a_callback_that_closes_over_its_group():
    class Owner:
        pass

    owner = Owner()

    def closes_over(group, fut):
        return owner

    with pytest.raises(TypeError, match="closes over its group"):
        then_completion(_Future(None), closes_over, owner)


def test_every_completion_callback_of_the_group_goes_through_the_helper():
    """A ``.then(...)`` written directly in the group's modules would bring the crash back: the only
    direct one allowed is the helper's own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "integration"
    allowed = {"return fut.then(_Completion(fn, owner))"}
    direct = []
    for path in sorted(root.glob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if ".then(" in code and "``" not in code and not any(a in code for a in allowed):
                direct.append(f"{path.name}:{n}: {line.strip()}")
    assert direct == [], "completion callbacks chained without then_completion:\n" + "\n".join(direct)


def test_shutdown_waits_until_the_callbacks_that_ran_are_dropped():
    """The hang: ``~ProcessGroupGloo`` (the group dropped with the GIL held, e.g. by DDP's reducer)
    joined a gloo thread still waiting for the GIL to drop a callback it had run. ``shutdown`` (what
    ``destroy_process_group`` calls) therefore waits, with the GIL released, until those are dropped."""
    import threading
    import time

    group, fut, box = _one_lossy_allreduce()
    with contextlib.suppress(LinkFailure):  # BER 1e-2 loses frames: the callback raises, having run
        box[0](fut)  # the callback runs (as on gloo's thread) ...
    assert _RAN_NOT_DROPPED.value >= 1
    dropped = []

    def drop_later():  # ... and is dropped a while later, by that thread
        time.sleep(0.3)
        dropped.append(time.monotonic())
        box.clear()

    th = threading.Thread(target=drop_later)
    th.start()
    group.shutdown()
    returned = time.monotonic()
    th.join()
    assert dropped and returned >= dropped[0], "shutdown returned while a callback that ran was not yet dropped"
    assert _RAN_NOT_DROPPED.value == 0


def test_a_callback_that_never_ran_is_not_waited_for():
    group, fut, box = _one_lossy_allreduce()  # its callback is held, never run
    assert drain_completions(limit_s=0.05)


def test_a_callback_that_raised_is_not_kept_counted_by_its_traceback():
    """A lost frame makes the callback raise; the chained future keeps the exception, and its traceback
    the callback's frame. The count must still drop when the worker thread drops the callback (else
    every shutdown after a link failure waited out the drain's limit)."""
    group, fut, box = _one_lossy_allreduce()
    before = _RAN_NOT_DROPPED.value
    with pytest.raises(LinkFailure) as kept:
        box[0](fut)
    assert _RAN_NOT_DROPPED.value == before + 1
    box.clear()  # the worker thread drops the callback; the exception (and its traceback) lives on
    assert kept.value.__traceback__ is not None
    assert _RAN_NOT_DROPPED.value == before, "the raised exception's traceback keeps the callback counted"
