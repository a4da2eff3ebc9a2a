"""Issue 23: the wrapper's NCCL code path on CPU, over a stand-in checked against torch's own bindings."""

import json
import os
import subprocess
import sys

import pytest
import torch  # noqa: F401

from integration.fake_nccl import backend_signatures, check_call

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_signatures_come_from_the_installed_torch_and_reject_a_device_argument():
    sigs = backend_signatures()
    assert sigs["_start_coalescing"] == [[]] and sigs["_end_coalescing"] == [[]]
    check_call("_start_coalescing", (), {})
    with pytest.raises(TypeError, match="incompatible"):
        check_call("_start_coalescing", (torch.device("cpu"),), {})  # the call of main before issue 23
    with pytest.raises(TypeError, match="incompatible"):
        check_call("_end_coalescing", (torch.device("cpu"),), {})
    check_call("send", ([torch.ones(1)], 1, 0), {})
    with pytest.raises(TypeError):
        check_call("send", ([torch.ones(1)], 1), {})  # tag is required by the binding
    with pytest.raises(TypeError, match="no method"):
        check_call("_start_coalescing_v2", (), {})


def test_gpu_check_fake_nccl_runs_every_op_and_dtype():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--fake-nccl", "--json"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(p.stdout[p.stdout.index("{"):])
    assert res["passed"] is True
    assert set(res["dtypes"]) >= {"float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}
    assert len(res["ops"]) >= 13
    rows = res["rows"]
    for op in res["ops"]:
        for mode in ("endpoint", "ring"):
            assert any(r[0] == op and r[1] == mode and r[3] == "PASS" for r in rows), (op, mode)
    # float8 and FSDP2's uint8 all-gather are corrupted, not classed as control
    for d in ("float8_e4m3fn", "float8_e5m2", "uint8"):
        assert any(r[2] == d and "flips applied" in r[4] and r[3] == "PASS" for r in rows), d
    # ring hops went through NCCL-style coalescing, with the binding's (device-free) signature
    assert {"_start_coalescing", "_end_coalescing", "send", "recv"} <= set(res["nccl_calls"])
