"""Sharded sweep points: worker-count invariance, the global stop rule, Dask LocalCluster."""

from __future__ import annotations

import concurrent.futures as cf
import json

import pytest

from phy802.cli import main
from phy802.sweep import SweepConfig, n_shards, run_shard, run_sweep, shard_seed

# max_seconds=None: a time cap would make the stopping point depend on speed (how many shards
# finish before the clock runs out), the one rule that cannot be worker-count invariant
SHARDED = dict(points=(2e-3, 1.6e-3), code=("kp4",), fec=("ieee", "bypass"), target_errors=15, max_codewords=6_000,
               max_seconds=None, shard_pairs=200, batch_pairs=100, seed=3)


def _counts(res):
    out = []
    for p in res.points:
        d = p.counters.as_dict()
        d.pop("seconds")
        out.append((p.mode, p.x, p.stop_reason, d))
    return out


def test_sharded_point_does_not_depend_on_workers():
    cfg = SweepConfig(**SHARDED)
    serial = run_sweep(cfg)
    ref = _counts(serial)
    # several shards were needed by the kp4 point at 1.6e-3, and its stop rule is the global one
    kp4 = serial.point("kp4/ieee", 1.6e-3)
    assert kp4.counters.pairs > 200 and kp4.counters.pairs % 200 == 0
    assert kp4.stop_reason == "target_errors" and kp4.counters.codeword_errors >= 15
    assert [p.stop_reason for p in serial.points].count("target_errors") == 4
    for kw in (dict(executor="process", workers=1), dict(executor="process", workers=2)):
        assert _counts(run_sweep(cfg, **kw)) == ref, kw
    with cf.ThreadPoolExecutor(3) as ex:  # any executor, shards finishing out of order
        assert _counts(run_sweep(cfg, executor=ex, workers=3)) == ref


def test_prefix_rule_and_codeword_cap():
    cfg = SweepConfig(points=(1e-5,), code=("kp4",), fec=("ieee",), target_errors=10, max_codewords=1001, max_seconds=None,
                      shard_pairs=150, batch_pairs=64)
    t = cfg.tasks()[0]
    assert n_shards(t) == 4  # 501 pairs in 150-pair shards, the last one cut
    p = run_sweep(cfg).points[0]
    assert p.stop_reason == "max_codewords" and p.counters.pairs == 501
    # a shard is a fixed number of pairs from its own seed: rerunning it gives the same counts
    a, b = run_shard(t, 3)[2].as_dict(), run_shard(t, 3)[2].as_dict()
    a.pop("seconds"), b.pop("seconds")
    assert a == b and a["pairs"] == 51
    assert shard_seed(t, 2).generate_state(4).tolist() == t.seed.spawn(3)[2].generate_state(4).tolist()
    with pytest.raises(ValueError, match="shard_pairs"):
        SweepConfig(points=(1e-5,), shard_pairs=0)


def test_sharded_point_on_a_dask_local_cluster(tmp_path, capsys):
    import distributed  # declared dependency (extra "dask")
    cfg = SweepConfig(**SHARDED)
    ref = _counts(run_sweep(cfg))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        assert _counts(run_sweep(cfg, executor=client.get_executor(), workers=2)) == ref
        # the README command, against the cluster's scheduler address
        rc = main(["sweep", "--ber", "2e-3,1.6e-3", "--code", "kp4", "--fec", "ieee,bypass", "--target-errors", "15",
                   "--max-codewords", "6000", "--max-seconds", "0", "--shard-pairs", "200", "--batch", "100",
                   "--seed", "3", "--scheduler", lc.scheduler_address, "--no-progress", "--json"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    assert [(q["mode"], q["x"], q["codewords"], q["codeword_errors"]) for q in got["points"]] == \
        [(m, x, d["codewords"], d["codeword_errors"]) for m, x, _, d in ref]
