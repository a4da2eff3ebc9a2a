"""A strict CPU stand-in for ``ProcessGroupNCCL`` as the replay wrapper's inner backend (issue 23).

The CPU build of torch has no ``ProcessGroupNCCL``, so the wrapper's NCCL code path could not
run in CI. :class:`StrictNcclStandIn` runs it on CPU: it forwards to a gloo backend, but

* every method it offers is checked, on every call, against the signature of the same method of
  the installed torch's ``torch._C._distributed_c10d.Backend`` (``ProcessGroupNCCL``'s base class
  in the binding), parsed from the pybind11 docstring: a call that no overload accepts raises
  ``TypeError``, as the real binding would (the defect this catches: ``_start_coalescing(device)``
  on a Backend, whose binding is ``_start_coalescing(self) -> None``);
* the NCCL-only methods ``_group_start``, ``_group_end``, ``_shutdown`` take no argument
  (torch/csrc/distributed/c10d/init.cpp, ``processGroupNCCL.def("_group_start",
  &ProcessGroupNCCL::groupStart)`` etc.; not introspectable on a CPU build, so written here from
  that source);
* ``supports_coalescing`` is True and sends/receives between ``_start_coalescing()`` and
  ``_end_coalescing()`` are issued together at the end (one Work), as NCCL's group;
* futures are complete when the op is issued (NCCL's are: ``fut.done()`` is true once the op is
  enqueued), so ``then`` callbacks run at once in the caller's thread. The stand-in makes each op
  complete before it returns (its "stream order"), so a callback sees the data.

Use: ``PHY802_FAKE_NCCL=1`` makes :class:`integration.process_group.ReplayProcessGroup` use it as
the inner backend of every tensor (see ``benchmarks/gpu_check.py --fake-nccl``).
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["ENV_VAR", "StrictNcclStandIn", "backend_signatures", "check_call"]

ENV_VAR = "PHY802_FAKE_NCCL"

# NCCL-only bindings (ProcessGroupNCCL in torch/csrc/distributed/c10d/init.cpp): name -> parameter names
_NCCL_ONLY = {"_group_start": (), "_group_end": (), "_shutdown": ()}

_SIG = re.compile(r"^(?:\d+\. )?(\w+)\((.*)\) -> .*$")


def _split_params(text: str) -> list[tuple[str, bool]]:
    """``[(name, has_default)]`` of a pybind11 parameter list (``self`` dropped)."""
    out, depth, cur = [], 0, ""
    for ch in text + ",":
        if ch in "[(<{":
            depth += 1
        elif ch in "])>}":
            depth -= 1
        if ch == "," and depth == 0:
            part = cur.strip()
            cur = ""
            if not part:
                continue
            name = part.split(":")[0].split("=")[0].strip()
            if name != "self":
                out.append((name, "=" in part))
            continue
        cur += ch
    return out


def backend_signatures(cls: type | None = None) -> dict[str, list[list[tuple[str, bool]]]]:
    """Each method of torch's ``Backend`` binding -> its overloads' parameters, from the installed torch."""
    cls = cls if cls is not None else torch._C._distributed_c10d.Backend
    sigs: dict[str, list[list[tuple[str, bool]]]] = {}
    for name in dir(cls):
        if name.startswith("__"):
            continue
        doc = getattr(getattr(cls, name), "__doc__", None) or ""
        for line in doc.splitlines():
            m = _SIG.match(line.strip())
            if m and m.group(1) == name:
                sigs.setdefault(name, []).append(_split_params(m.group(2)))
    return sigs


_SIGS: dict[str, list[list[tuple[str, bool]]]] | None = None


def check_call(name: str, args: tuple, kwargs: dict) -> None:
    """Raise ``TypeError`` unless some overload of ``Backend.<name>`` (or an NCCL-only binding) takes the call."""
    global _SIGS
    if _SIGS is None:
        _SIGS = backend_signatures()
    overloads = _SIGS.get(name)
    if overloads is None:
        if name not in _NCCL_ONLY:
            raise TypeError(f"ProcessGroupNCCL has no method {name!r} (not in torch {torch.__version__}'s Backend binding)")
        overloads = [[(p, False) for p in _NCCL_ONLY[name]]]
    for params in overloads:
        names = [p for p, _ in params]
        if len(args) > len(params):
            continue
        given = set(names[:len(args)])
        if any(k not in names or k in given for k in kwargs):
            continue
        given |= set(kwargs)
        if all(p in given or has_default for p, has_default in params):
            return
    shown = " | ".join("(" + ", ".join(p + ("=..." if d else "") for p, d in ps) + ")" for ps in overloads)
    raise TypeError(f"{name}(): incompatible arguments: {len(args)} positional, keywords {sorted(kwargs)}; "
                    f"the binding takes {shown}")


_F8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


def _bytes_view(x):
    """float8 tensors as their uint8 bytes (NCCL >= 2.24 moves float8 natively; gloo has no float8 type)."""
    if isinstance(x, torch.Tensor):
        return x.view(torch.uint8) if x.dtype in _F8 else x
    if isinstance(x, (list, tuple)):
        return type(x)(_bytes_view(v) for v in x)
    return x


class _DoneWork(dist.Work):
    """A Work that is complete at issue (its future too), holding ``result``."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self._fut = torch.futures.Future()
        self._fut.set_result(result)

    def wait(self, timeout=None) -> bool:  # noqa: ARG002 - NCCL's wait: the stream waits; here, done
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return True


class StrictNcclStandIn:
    """gloo underneath, ``ProcessGroupNCCL``'s binding on top (see the module docstring)."""

    supports_coalescing = True

    def __init__(self, gloo, timeout_s: float = 60.0) -> None:
        self._gloo = gloo
        self._timeout_s = float(timeout_s)
        self._coalescing: list | None = None
        self.calls: list[str] = []  # names of the methods called, in order (for tests)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = getattr(self._gloo, name)  # AttributeError for what gloo lacks too

        def call(*args, **kwargs):
            check_call(name, args, kwargs)
            self.calls.append(name)
            if self._coalescing is not None and name in ("send", "recv"):
                self._coalescing.append((target, args, kwargs))
                return _DoneWork(None)
            work = target(*_bytes_view(args), **kwargs)
            if name == "send":  # a send is enqueued, not waited for (it completes when its recv runs)
                self._sends = [w for w in getattr(self, "_sends", []) if not w.is_completed()] + [work]
                return _DoneWork(args[0] if args else None)
            return self._complete(work, name, args)

        return call

    def _complete(self, work, name: str, args: tuple):
        from datetime import timedelta

        if work is not None:
            work.wait(timedelta(seconds=self._timeout_s))  # stream order: done before the op returns
        return _DoneWork(args[0] if args else None)

    def _start_coalescing(self, *args, **kwargs) -> None:
        check_call("_start_coalescing", args, kwargs)
        self.calls.append("_start_coalescing")
        if self._coalescing is not None:
            raise RuntimeError("ProcessGroupNCCL: coalescing already started")
        self._coalescing = []

    def _end_coalescing(self, *args, **kwargs):
        from datetime import timedelta

        check_call("_end_coalescing", args, kwargs)
        self.calls.append("_end_coalescing")
        queued, self._coalescing = self._coalescing, None
        if queued is None:
            raise RuntimeError("ProcessGroupNCCL: _end_coalescing without _start_coalescing")
        works = [fn(*a, **k) for fn, a, k in queued]  # issued together, as one NCCL group
        for w in works:
            w.wait(timedelta(seconds=self._timeout_s))
        return _DoneWork(None)

    def _group_start(self, *args, **kwargs) -> None:
        check_call("_group_start", args, kwargs)
        self._start_coalescing()

    def _group_end(self, *args, **kwargs) -> None:
        check_call("_group_end", args, kwargs)
        self._end_coalescing()

    def _shutdown(self, *args, **kwargs) -> None:
        check_call("_shutdown", args, kwargs)
        self.calls.append("_shutdown")
