"""The wrapper's live error source at 800G / 1.6T (``protocol.trace.ConcatLiveSource``).

It must give, for one seed, the very payload-stream errors ``phy802 trace generate --rate R --inner I``
writes (same engine: ``ConcatLink.batches`` through ``protocol.trace.inner.stream_batches``), whatever the
cuts of the stream into calls; go through ``BufferedLink`` and the wrapper like the 400G generator; and
refuse settings the concatenated link does not model, naming the field.
"""

import json

import numpy as np
import pytest
import torch

from phy802.channel import Pam4Awgn
from phy802.cli import main
from phy802.link.concat import ConcatConfig
from protocol.delivery import deliver
from protocol.trace import ConcatLiveSource, open_source
from protocol.trace.generator import merge_ranges
from protocol.trace.inner import GROUP_STREAM_BITS, generate_inner_trace

from integration.sources import BufferedLink, SourceConfig, link_seed_sequence, make_link_source

BG = 150  # interleave groups per batch: 3.07 Mbit of stream, a few batches in well under a second


def _read_live(src, n: int, seed: int = 0, take_share: float = 0.0) -> tuple:
    """``n`` stream bits of ``src`` in calls of random sizes (take_chunk, and ``take`` for a share of
    them): absolute offsets, lanes, flags and merged marks (of the take_chunk calls)."""
    rng = np.random.default_rng(seed)
    off, lanes, flags, marks, pos = [], [], [], [], 0
    while pos < n:
        k = min(n - pos, int(rng.choice([0, 1, 257, 20480, 1 << 16, int(rng.integers(1, 4_000_000))])))
        if rng.random() < take_share:  # the plain ErrorSource face
            o = src.take(k)
            assert np.all(np.diff(o) > 0) and (o.size == 0 or (o[0] >= 0 and o[-1] < k))
            off.append(o + pos)
            lanes.append(None)
        else:
            ch = src.take_chunk(k)
            assert ch.n_bits == k and np.all(np.diff(ch.offsets) > 0)
            assert ch.offsets.size == 0 or (ch.offsets[0] >= 0 and ch.offsets[-1] < k)
            off.append(ch.offsets + pos)
            lanes.append(ch.lanes)
            flags.append(ch.flags)
            marks.append(ch.marks + pos)
        pos += k
    assert src.cursor == n
    return np.concatenate(off), lanes, flags, merge_ranges(np.concatenate(marks)) if marks else np.empty((0, 2))


@pytest.mark.parametrize("rate,inner,fec,ber", [
    ("800G", "c177", "bypass", 5e-3),
    ("800G", "c177", "ieee", 7e-3),  # KP4 flags codewords: marks of whole groups
    ("1.6T", "none", "ieee", 2e-3),
])
def test_live_source_equals_the_engines_trace_in_any_cuts(tmp_path, rate, inner, fec, ber):
    cfg = ConcatConfig(rate=rate, inner=inner, fec=fec)
    path = tmp_path / "t.trace"
    meta = generate_inner_trace(path, cfg, Pam4Awgn.from_ber(ber), n_codewords=4 * BG * 4, seed=5, batch_groups=BG)
    n = meta["stream_bits"]
    assert n == 4 * BG * GROUP_STREAM_BITS and meta["n_flips"] > 1000
    ref = open_source(path, start=0, wrap=False).take_chunk(n)
    for cut_seed in (0, 1):
        src = ConcatLiveSource(rate, fec, ber, seed=5, inner=inner, batch_groups=BG)
        off, lanes, flags, marks = _read_live(src, n, cut_seed)
        # the trace stores marks per chunk (batch): a group run across two batches is two ranges there
        assert np.array_equal(off, ref.offsets) and np.array_equal(marks, merge_ranges(ref.marks))
        assert np.array_equal(np.concatenate(lanes), ref.lanes) and np.array_equal(np.concatenate(flags), ref.flags)
    src = ConcatLiveSource(rate, fec, ber, seed=5, inner=inner, batch_groups=BG)
    assert np.array_equal(_read_live(src, n, 2, take_share=0.3)[0], ref.offsets)  # take and take_chunk mixed
    if fec == "ieee":
        assert meta["codewords"]["uncorrectable"] > 0 and ref.marks.shape[0] > 0


def test_live_source_equals_trace_generate_over_its_whole_batches(tmp_path, capsys):
    """``phy802 trace generate`` itself (default batches of 30000 groups = 614.4 Mbit): a trace of 2 whole
    batches and a part; the live source equals it over the 2 whole batches, and its last (cut) batch is
    drawn differently, as the docstring says."""
    n_cw = 2 * 4 * 30000 + 1000
    out = tmp_path / "t.trace"
    assert main(["trace", "generate", "--rate", "800G", "--inner", "none", "--fec", "bypass", "--ber", "1e-5",
                 "--bits", str(n_cw * 5440), "--seed", "4", "--out", str(out), "--no-progress", "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    whole = 2 * 30000 * GROUP_STREAM_BITS
    assert meta["codewords"]["total"] == 2 * 4 * 30000 + 4 * 252 and meta["stream_bits"] > whole
    ref = open_source(out, start=0, wrap=False).take_chunk(meta["stream_bits"])
    src = make_link_source(SourceConfig(ber=1e-5, seed=0, fec="bypass", rate="800G", inner="none"), 0, 1)
    assert isinstance(src, ConcatLiveSource)  # the wrapper's own factory; here with the CLI's int seed:
    src = ConcatLiveSource("800G", "bypass", 1e-5, seed=4, inner="none")
    off, *_ = _read_live(src, whole, 3, take_share=0.3)
    k = int(np.searchsorted(ref.offsets, whole))
    assert k > 30000 and np.array_equal(off, ref.offsets[:k])
    tail = src.take(meta["stream_bits"] - whole)
    assert not np.array_equal(tail + whole, ref.offsets[k:])


def test_live_source_seed_sequence_is_not_advanced_and_seeds_differ():
    ss = link_seed_sequence(3, 1, 0)
    a = ConcatLiveSource("800G", "bypass", 3e-3, seed=ss, batch_groups=BG).take(2 * BG * GROUP_STREAM_BITS)
    assert ss.n_children_spawned == 0
    b = ConcatLiveSource("800G", "bypass", 3e-3, seed=ss, batch_groups=BG).take(2 * BG * GROUP_STREAM_BITS)
    c = ConcatLiveSource("800G", "bypass", 3e-3, seed=link_seed_sequence(3, 0, 1),
                         batch_groups=BG).take(2 * BG * GROUP_STREAM_BITS)
    assert a.size > 100 and np.array_equal(a, b) and not np.array_equal(a, c)


_FIELDS = ("frames", "frames_resent", "frames_lost", "protected_removed", "stream_bits", "line_bits", "retransmit_ns")


# ieee/llr with inner none: the c177 link at a BER that flags codewords costs ~0.13 s per 3 Mbit batch, and
# BufferedLink reads ~16k errors ahead
@pytest.mark.parametrize("fec,inner,ber", [("ieee", "none", 1.5e-3), ("llr", "none", 1.5e-3), ("bypass", "c177", 3e-3),
                                           ("unequal", "c177", 3e-3)])
def test_buffered_link_equals_deliver_at_800g(fec, inner, ber):
    def src():
        return ConcatLiveSource("800G", fec, ber, seed=link_seed_sequence(9, 1, 0), inner=inner, batch_groups=BG)

    ref, fast = src(), BufferedLink(src(), fec, rate="800G", prefetch_bits=1 << 18)
    assert BufferedLink.supports(fast.source)
    seen = dict(flips=0, resent=0, lost=0)
    for s in list(np.random.default_rng(1).integers(1, 300_000, 30)) + [1 << 20]:
        d, e = deliver(int(s), ref, fec, rate="800G", float_format="float32"), fast.deliver(int(s), "float32")
        for k in _FIELDS:
            assert getattr(d, k) == getattr(e, k), (k, int(s))
        assert np.array_equal(d.payload_flips, e.payload_flips) and np.array_equal(d.lost_ranges, e.lost_ranges)
        assert e.line_bits == -(-17 * e.stream_bits // 16)  # the KP4 line: 21760 per 20480 stream bits, no AMs
        seen["flips"] += e.payload_flips.size
        seen["resent"] += e.frames_resent
        seen["lost"] += e.frames_lost
    assert fast.cursor == ref.cursor
    assert seen["resent"] > 0
    if fec in ("bypass", "unequal"):
        assert seen["flips"] > 0


@pytest.mark.parametrize("rate", ["800G", "1.6T"])
def test_wrapper_applies_the_live_800g_flips(rate):
    """``ReplayProcessGroup`` (rank 0 of 2 over torch's fake group) at 800G/1.6T: the received tensor's
    flipped bits are exactly the payload flips of link 1 -> 0's live source, delivered by BufferedLink."""
    from integration.process_group import ReplayProcessGroup
    from integration.replay import ReplayConfig

    src_cfg = SourceConfig(ber=1e-5, seed=3, fec="bypass", rate=rate, inner="none")
    cfg = ReplayConfig(source=src_cfg, mode="endpoint", classes=("gradients",), guard="none")
    assert ReplayConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # what register() puts in the env
    g = ReplayProcessGroup.standalone(cfg)
    oracle = BufferedLink(ConcatLiveSource(rate, "bypass", 1e-5, seed=link_seed_sequence(3, 1, 0), inner="none"),
                          "bypass", rate=rate)
    total = 0
    for numel in (1 << 20, 300_001):
        x = torch.ones(numel)
        g.allreduce([x]).wait()
        want = oracle.deliver(4 * numel, "float32").payload_flips
        diff = (x.view(torch.int32) ^ torch.ones(numel).view(torch.int32)).numpy().view(np.uint8)
        got = np.flatnonzero(np.unpackbits(diff, bitorder="little"))
        assert np.array_equal(got, want)
        total += got.size
    assert total > 100
    link = g._links[(1, 0)]
    assert isinstance(link, BufferedLink) and isinstance(link.source, ConcatLiveSource)
    assert link.cursor == oracle.cursor
    assert g.metrics.total("line_bits") == -(-17 * g.metrics.total("stream_bits") // 16)
    assert g.metrics.total("errors_injected") == total


def test_source_config_at_800g_defaults_and_round_trip():
    c = SourceConfig(ber=1e-3, seed=1, fec="ieee", rate="800G")
    assert c.inner is None and c.inner_code == "c177" and SourceConfig().inner_code == "none"
    s = make_link_source(c, 0, 1)  # no take: a whole c177 batch at 1e-3 takes seconds
    assert isinstance(s, ConcatLiveSource) and s.config.inner == "c177" and s.config.inner_decoder == "chase"
    assert s.config.fec == "ieee" and s.config.rate == "800G"
    assert make_link_source(SourceConfig(ber=1e-3, rate="1.6T", fec="llr", inner="none"), 0, 1).config.fec == "ieee"
    assert SourceConfig(**json.loads(json.dumps(c.__dict__))) == c
    assert SourceConfig(ber=1e-5, rate="400G", inner="none").inner_code == "none"
    # the config's own copy of the rates (kept so that it imports no protocol module) is the layer's
    from integration.sources import _INNER_RATES
    from protocol.framing import INNER_STREAM_RATES

    assert _INNER_RATES == INNER_STREAM_RATES


@pytest.mark.parametrize("kw,field", [
    (dict(rate="400G", inner="c177"), "SourceConfig.inner"),
    (dict(rate="800G", inner="c178"), "SourceConfig.inner"),
    (dict(rate="100G"), "SourceConfig.rate"),
    (dict(rate="800G", fec="detect_only"), "SourceConfig.fec"),
    (dict(rate="1.6T", fec="correct_no_indication"), "SourceConfig.fec"),
    (dict(rate="800G", fec="nope"), "SourceConfig.fec"),
    (dict(rate="800G", code="rs272"), "SourceConfig.code"),
    (dict(rate="800G", code="none"), "SourceConfig.code"),  # the 800G generator models KP4
    (dict(rate="800G", ber=0.5), "SourceConfig.ber"),
])
def test_source_config_refuses_what_800g_does_not_model(kw, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        SourceConfig(**{"ber": 1e-3, **kw})


def test_live_source_refuses_bad_settings():
    with pytest.raises(ValueError, match="ber or snr_db"):
        ConcatLiveSource("800G", "ieee", seed=1)
    with pytest.raises(ValueError, match="ber or snr_db"):
        ConcatLiveSource("800G", "ieee", 1e-3, snr_db=15.0, seed=1)
    with pytest.raises(ValueError, match="ConcatConfig.rate"):
        ConcatLiveSource("400G", "ieee", 1e-3, seed=1)
    with pytest.raises(ValueError, match="detect_only"):
        ConcatLiveSource("800G", "detect_only", 1e-3, seed=1)
    with pytest.raises(ValueError, match="n_bits"):
        ConcatLiveSource("800G", "ieee", 1e-3, seed=1).take(-1)
    # 800G sources are fine where the layer delivers; only the KP4 layout has a line there
    assert make_link_source(SourceConfig(ber=1e-4, rate="800G", kind="independent", code="none"), 0, 1) is not None


def _rc(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse usage errors
        return exc.code


TINY = ["--corpus", "stdlib", "--n-layer", "2", "--n-embd", "32", "--n-head", "2", "--block-size", "16",
        "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--timeout", "120"]


@pytest.mark.parametrize("extra,needle", [
    (["--inner", "c177"], "--inner 'c177': rate 400G has no inner code"),
    (["--rate", "800G", "--fec", "detect_only"], "--fec 'detect_only' at 800G"),
    (["--rate", "1.6T", "--code", "rs272"], "--code 'rs272' at 1.6T"),
    (["--rate", "800G", "--ber", "0.6"], "--ber 0.6 at 800G"),
    (["--rate", "100G"], "--rate"),
])
def test_train_cli_refuses_800g_settings_naming_the_option(extra, needle, capsys):
    assert _rc(["train", "--steps", "1", *TINY, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and needle in err[-1] and "Traceback" not in "\n".join(err)


def test_train_cli_at_800g_end_to_end(capsys):
    rc = main(["train", "--parallel", "ddp", "--world-size", "2", "--rate", "800G", "--inner", "none", "--fec",
               "bypass", "--ber", "1e-4", "--steps", "2", "--seed", "2", "--json", *TINY])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    src = r["config"]["replay"]["source"]
    assert src["rate"] == "800G" and src["inner"] == "none" and src["kind"] == "generator"
    assert sum(r["metrics"]["errors_injected"].values()) > 0


def test_wrapper_replays_an_800g_trace_at_800g(tmp_path):
    """``kind="trace"`` with ``rate="800G"`` (it was refused as an unknown rate): the non-buffered delivery path,
    with the 800G line-bit count."""
    from integration.process_group import ReplayProcessGroup
    from integration.replay import ReplayConfig

    path = tmp_path / "t.trace"
    generate_inner_trace(path, ConcatConfig(rate="800G", inner="none", fec="bypass"), Pam4Awgn.from_ber(1e-4),
                         n_codewords=4 * BG * 4, seed=2, batch_groups=BG)
    cfg = ReplayConfig(source=SourceConfig(ber=1e-4, seed=3, fec="bypass", rate="800G", kind="trace", trace=str(path)),
                       classes=("gradients",), guard="none")
    g = ReplayProcessGroup.standalone(cfg)
    x = torch.ones(1 << 18)
    g.allreduce([x]).wait()
    ref = deliver(4 << 18, make_link_source(cfg.source, 1, 0), "bypass", rate="800G")
    diff = (x.view(torch.int32) ^ torch.ones(1 << 18).view(torch.int32)).numpy().view(np.uint8)
    assert ref.payload_flips.size > 10
    assert np.array_equal(np.flatnonzero(np.unpackbits(diff, bitorder="little")), ref.payload_flips)
    assert g.metrics.total("line_bits") == ref.line_bits == -(-17 * ref.stream_bits // 16)


def test_a_trace_replayed_at_another_rate_is_refused(tmp_path, capsys):
    """An 800G trace at the default rate 400G was replayed and its line bits counted at 400G, silently."""
    path = tmp_path / "t.trace"
    generate_inner_trace(path, ConcatConfig(rate="800G", inner="none", fec="bypass"), Pam4Awgn.from_ber(1e-4),
                         n_codewords=4 * BG, seed=2, batch_groups=BG)
    bad = SourceConfig(ber=1e-4, seed=3, fec="bypass", rate="400G", kind="trace", trace=str(path))
    with pytest.raises(ValueError, match=r"SourceConfig.rate '400G' does not match .* '800G'"):
        make_link_source(bad, 1, 0)
    make_link_source(SourceConfig(ber=1e-4, seed=3, fec="bypass", rate="800G", kind="trace", trace=str(path)), 1, 0)
    assert main(["train", "--source", "trace", "--trace", str(path), "--fec", "bypass", "--ber", "1e-4",
                 "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "--rate '400G' does not match" in err and "'800G'" in err and "Traceback" not in err
