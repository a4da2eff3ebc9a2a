"""The model against the public nccl-tests runs kept with the project (``tests/data/nccl/runs.json``).

Each entry names a run file, the cluster its header states or infers (a preset and
:class:`~protocol.cluster.topology.ClusterSpec` fields), the regime it stands for, the goal it is
held to (worst measured/predicted ratio from ``MIN_BYTES`` up, before calibration), the
``NCCL_ALGO`` / ``NCCL_PROTO`` the run was made with (``algo`` / ``proto``, where it sets them) and its role:
``held-out`` runs set no constant of the model, ``tuning-small`` runs set a transport's latency
from their rows below ``MIN_BYTES`` only, ``tuning`` runs set the constant named in ``sets``,
``flagged`` runs are clusters with a problem that the model must report, not fit.  :func:`evaluate` gives, per run and size, the ratio
(measured / predicted: above 1, the model is too fast).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass

from .nccl import predict
from .ncclfile import read_nccl_tests
from .topology import preset

__all__ = ["MIN_BYTES", "ROLES", "RunSpec", "load_runs", "evaluate", "summary", "holdout"]

#: the goals of the model are stated from 8 KB up (below, nccl-tests times are launch-bound)
MIN_BYTES = 8192
ROLES = ("held-out", "tuning-small", "tuning", "flagged")


@dataclass(frozen=True)
class RunSpec:
    """One entry of ``runs.json`` (module docstring)."""

    path: str
    op: str
    preset: str
    fields: tuple
    algo: str | None
    regime: str
    goal: float | None
    role: str
    goal_median: float | None = None
    proto: str | None = None

    def cluster(self, **over):
        run = read_nccl_tests(self.path, op=self.op)
        kw = {"nodes": run.nodes, "gpus_per_node": run.gpus_per_node}
        kw.update(dict(self.fields))
        kw.update(over)
        return preset(self.preset, **kw)


def load_runs(path: str | os.PathLike) -> list[RunSpec]:
    """The entries of a ``runs.json`` (file paths resolved next to it)."""
    p = os.fspath(path)
    with open(p, encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("format") != "phy802-nccl-runs" or doc.get("version") != 1:
        raise ValueError(f"{p}: not a phy802-nccl-runs file of version 1")
    base = os.path.dirname(p)
    out = []
    for i, e in enumerate(doc["runs"]):
        if e.get("role") not in ROLES:
            raise ValueError(f"{p}: runs[{i}]: field 'role' must be one of {', '.join(ROLES)}")
        out.append(RunSpec(os.path.join(base, e["file"]), e["op"], e["preset"], tuple(sorted(e["fields"].items())),
                           e.get("algo"), e["regime"], e.get("goal"), e["role"], e.get("goal_median"),
                           e.get("proto")))
    return out


def evaluate(spec: RunSpec, *, table=None, **over) -> list[dict]:
    """Per size: bytes, measured and predicted us, ratio, the chosen algorithm/protocol and channels."""
    run = read_nccl_tests(spec.path, op=spec.op)
    c = spec.cluster(**over)
    rows = []
    for b, t in zip(run.bytes, run.time_us):
        pr = predict(run.op, b, c, algo=spec.algo, proto=spec.proto, table=table)
        rows.append({"bytes": int(b), "measured_us": float(t), "predicted_us": pr.time_us,
                     "ratio": float(t) / pr.time_us, "algo": pr.algo, "proto": pr.proto, "channels": pr.channels})
    return rows


def summary(rows: list[dict], min_bytes: int = MIN_BYTES) -> dict | None:
    """Worst (max of r and 1/r) and median ratio over the rows from ``min_bytes`` up (None if none)."""
    rs = [r["ratio"] for r in rows if r["bytes"] >= min_bytes]
    if not rs:
        return None
    return {"n": len(rs), "min": min(rs), "max": max(rs), "worst": max(max(rs), 1 / min(rs)),
            "median": statistics.median(rs), "median_abs": math.exp(statistics.median(abs(math.log(r)) for r in rs))}


def holdout(spec: RunSpec, k: int = 2, *, table=None) -> list[dict] | None:
    """Hold out every ``k``-th size from ``MIN_BYTES`` up, calibrate on all the others (smaller sizes
    included, as ``--calibrate --holdout`` does) and return the held-out rows (``ratio`` after
    calibration; None where fewer than 3 sizes are left to fit)."""
    from .ncclfile import apply_calibration, calibrate

    run = read_nccl_tests(spec.path, op=spec.op)
    c = spec.cluster()
    idx = [i for i, b in enumerate(run.bytes) if b >= MIN_BYTES]
    held = [i for j, i in enumerate(idx) if j % k == k - 1]
    use = [i for i in range(len(run.bytes)) if i not in held]
    if len(use) < 3 or not held:
        return None
    cal = calibrate(run, c, algo=spec.algo, proto=spec.proto, table=table, use=use)
    cc = apply_calibration(c, cal)
    out = []
    for i in held:
        pr = predict(run.op, run.bytes[i], cc, algo=spec.algo, proto=spec.proto, table=table)
        out.append({"bytes": int(run.bytes[i]), "measured_us": float(run.time_us[i]), "predicted_us": pr.time_us,
                    "ratio": float(run.time_us[i]) / pr.time_us, "structure": cal["structure"],
                    "implausible": cal["implausible"]})
    return out
