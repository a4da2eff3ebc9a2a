"""``phy802 trace generate --rate 800G|1.6T --inner ...``: the trace's counters equal
``phy802 link``'s on the same seed, its flips and marks equal an independent numpy construction
from the link's residual errors, its statistics lie inside 95% Clopper-Pearson intervals around
the closed forms of phy802.theory_inner (fixed seeds), and bad requests exit 2."""

import json

import numpy as np
import pytest

from phy802 import theory_inner as T
from phy802.channel import Pam4Awgn
from phy802.cli import main
from phy802.link.concat import ConcatConfig, ConcatLink
from phy802.stats import rate
from protocol.trace import TraceReader
from protocol.trace.inner import codewords_for_line_bits, generate_inner_trace


def _bits_for(n_cw: int, inner: str = "c177") -> int:
    per = 5440 * (128 / 120 if inner == "c177" else 1)
    b = int(n_cw * per) - 1
    assert codewords_for_line_bits(b, inner) == n_cw
    return b


@pytest.mark.parametrize("argv", [
    ["--rate", "800G", "--inner-decoder", "hard", "--snr-db", "15", "--path", "fast"],
    ["--rate", "800G", "--inner-decoder", "chase", "--snr-db", "14.6", "--path", "exact", "--fec", "bypass"],
    ["--rate", "1.6T", "--inner-decoder", "hard", "--snr-db", "15", "--path", "fast", "--hops", "2",
     "--outer", "end_to_end"],
    ["--rate", "800G", "--inner", "none", "--snr-db", "18", "--path", "fast"],
])
def test_counters_equal_link_on_the_same_seed(tmp_path, capsys, argv):
    n = 1200 if "exact" in argv else 6000
    inner = "none" if "none" in argv else "c177"
    assert main(["link", *argv, "--codewords", str(n), "--seed", "7", "--json"]) == 0
    link = json.loads(capsys.readouterr().out)
    out = tmp_path / "t.trace"
    assert main(["trace", "generate", *argv, "--bits", str(_bits_for(n, inner)), "--seed", "7", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    tr = json.loads(capsys.readouterr().out)
    a, b = dict(link["counters"]), dict(tr["inner"]["counters"])
    a.pop("seconds", None), b.pop("seconds", None)
    assert a == b
    assert a["codewords"] >= n and a["line_bit_errors"] > 0
    assert tr["post_fec"]["decoder_output"]["bit_errors"] == a["post_fec_bit_errors"]
    assert tr["codewords"]["total"] == a["codewords"] and tr["codewords"]["uncorrectable"] == a["uncorrected_codewords"]
    assert tr["codewords"]["delivered_wrong"] == a["codeword_errors"]
    assert tr["rate"] == argv[1] and tr["n_lanes"] == (4 if argv[1] == "800G" else 8) and tr["format_minor"] == 1
    with TraceReader(out) as r:
        assert r.check()["flips"] == tr["n_flips"]


def _oracle(link, n_cw, seed):
    """Payload flips, their lanes and the marks, built densely in numpy from the link's residual
    (not through protocol.trace.inner): the group's message bits in 119.2.4.5 order (symbol i of
    codeword x at stream symbol 4 i + x), the 1 + x^39 + x^58 descrambler as shifted XORs over the
    whole 257b-block stream, header bits (every 257th) turned into block marks."""
    es, ks = [], []
    G_total = 0
    for g0, G, _, res in link.batches(n_cw, seed, batch_groups=150):
        d = np.zeros((4 * G, 514), np.int64)
        d[res.keys // 544, res.keys % 544] = res.values
        bits = (d.reshape(G, 4, 514).transpose(0, 2, 1)[..., None] >> np.arange(10)) & 1  # [G, 514, 4, 10]
        es.append(bits.reshape(-1).astype(np.uint8))
        flagged = np.zeros(G, bool)
        flagged[np.asarray(res.flagged) // 4] = True
        ks.append(flagged)
        G_total += G
    e = np.concatenate(es)
    n = e.size
    assert n == G_total * 80 * 257
    y = e.copy()
    y[39:] ^= e[:-39]
    y[58:] ^= e[:-58]
    blocks = y.reshape(-1, 257)
    hdr = np.flatnonzero(blocks[:, 0])
    flips = np.flatnonzero(blocks[:, 1:].reshape(-1))
    flagged_groups = np.flatnonzero(np.concatenate(ks))
    covered = np.zeros(G_total * 80, bool)
    covered[hdr] = True
    covered[(flagged_groups[:, None] * 80 + np.arange(80)).ravel()] = True
    return flips, covered


@pytest.mark.parametrize("fec,path,snr", [("bypass", "exact", 14.6), ("ieee", "fast", 14.6)])
def test_flips_and_marks_against_a_dense_oracle(tmp_path, fec, path, snr):
    cfg = ConcatConfig(rate="800G", inner_decoder="hard", fec=fec)
    ch = Pam4Awgn(snr_db=snr)
    n = 1200 if path == "exact" else 6000
    meta = generate_inner_trace(tmp_path / "t.trace", cfg, ch, n_codewords=n, seed=3, path_kind=path,
                                batch_groups=150)
    flips, covered = _oracle(ConcatLink(cfg, ch, path=path), n, 3)
    with TraceReader(tmp_path / "t.trace") as r:
        chunks = [r.chunk(i) for i in range(r.n_chunks)]
    assert len(chunks) > 1  # several batches: the descrambler carry crosses chunk boundaries
    off = np.concatenate([c.offsets for c in chunks])
    marks = np.concatenate([c.marks for c in chunks])
    # the last 58 bits' copies past the end are not in the trace (as in the 400G traces)
    assert np.array_equal(off, flips[flips < meta["stream_bits"]])
    got = np.zeros(covered.size, bool)
    for a, b in marks:
        assert a % 256 == 0 and b % 256 == 0
        got[a // 256: b // 256] = True
    assert np.array_equal(got, covered)
    assert flips.size > 100 and (fec == "bypass" or covered.any())
    lanes = np.concatenate([c.lanes for c in chunks])
    assert lanes.min() >= 0 and lanes.max() == 3


def test_lanes_are_the_physical_lanes_of_the_symbols():
    # interleaved rule: chunk i (symbol i of the 4 codewords) on lane i mod 4; codeword rule: stream symbol s on s mod L
    for rule, L in (("interleaved", 4), ("codeword", 8)):
        cfg = ConcatConfig(rate="800G" if L == 4 else "1.6T", lane_rule=rule)
        link = ConcatLink(cfg, Pam4Awgn(snr_db=15.0))
        cw = np.arange(8)
        sym = np.array([0, 1, 2, 3, 4, 5, 300, 513])
        lane = link.lane_of_key(cw * 544 + sym)
        want = sym % L if rule == "interleaved" else (4 * sym + cw % 4) % L
        assert np.array_equal(lane, want)


def test_statistics_against_the_closed_forms(tmp_path):
    # hard decoding at 15 dB, 800G interleaved: block failure, KP4-input BER and FER inside the 95%
    # Clopper-Pearson intervals of the trace's counts; the closed forms are exact (BSC enumeration
    # + generating function on the exact layout)
    snr = 15.0
    cfg = ConcatConfig(rate="800G", inner_decoder="hard")
    meta = generate_inner_trace(tmp_path / "t.trace", cfg, Pam4Awgn(snr_db=snr), n_codewords=12000, seed=11)
    c = meta["inner"]["counters"]
    law = T.inner_law_bsc(*T.awgn_position_probs(snr), m=cfg.symbols_per_block)
    fer = T.concat_fer(law, layout=T.layout_pieces(4, 4, "interleaved"))
    blk = rate(c["inner_failed"], c["inner_blocks"])
    assert blk.lo <= law.p_fail <= blk.hi, (blk, law.p_fail)
    f = rate(meta["codewords"]["delivered_wrong"], meta["codewords"]["total"])
    assert f.lo <= fer <= f.hi, (f, fer)
    assert meta["codewords"]["delivered_wrong"] > 300
    # bit errors cluster in failed blocks: the KP4-input BER interval is over blocks (mean wrong
    # bits per block, normal 95%), not over independent bits
    bits_per_block = c["inner_output_bit_errors"] / c["inner_blocks"]
    m_theory = law.ber_out * 120
    # variance bound: a failed block holds at most 120 wrong bits; use the sample's own moments
    # from the histogram of wrong bits per block is not stored, so bound with E[X^2] <= 120 E[X]
    sd = np.sqrt(120 * bits_per_block / c["inner_blocks"])
    assert abs(bits_per_block - m_theory) <= 1.96 * sd, (bits_per_block, m_theory, sd)
    # the payload flips are the wrong message bits x (1 + x^39 + x^58): between 1x and 3x
    dec = meta["post_fec"]["decoder_output"]["bit_errors"]
    assert dec <= meta["post_fec"]["bit_errors"] <= 3 * dec


def test_info_reads_an_inner_trace(tmp_path, capsys):
    out = tmp_path / "t.trace"
    assert main(["trace", "generate", "--rate", "1.6T", "--snr-db", "15", "--bits", "2e6", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "1.6T 8 physical lanes" in text and "inner      c177 (chase" in text and "fer (theory)" in text
    assert main(["trace", "info", str(out), "--check", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inner"]["hops"] == 1 and info["rate"] == "1.6T" and info["check"]["ok"]


@pytest.mark.parametrize("argv,msg", [
    (["--rate", "400G", "--inner", "c177"], "has no inner code"),
    (["--rate", "400G", "--snr-db", "15"], "--snr-db applies at 800G/1.6T"),
    (["--rate", "800G", "--snr-db", "15", "--workers", "2"], "--workers does not apply at 800G"),
    (["--rate", "800G", "--snr-db", "15", "--burst-pb", "0.5"], "--burst-pb does not apply"),
    (["--rate", "800G", "--snr-db", "15", "--ber", "1e-3"], "not both"),
    (["--rate", "800G", "--snr-db", "15", "--code", "rs272"], "keeps RS(544,514)"),
    (["--rate", "800G", "--snr-db", "15", "--fec", "detect_only"], "ieee and bypass"),
    (["--rate", "800G"], "--ber or --snr-db"),
    (["--rate", "800G", "--snr-db", "15", "--bits", "1e16"], "would take about"),
])
def test_bad_requests_exit_2(tmp_path, capsys, argv, msg):
    out = tmp_path / "t.trace"
    assert main(["trace", "generate", *argv, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err, err
    assert not out.exists()


def test_the_wrapper_replays_an_inner_trace(tmp_path):
    # integration's trace source (what 'phy802 train --source trace' and the ProcessGroup use)
    # reads an 800G trace: its flips by payload offset with the physical lanes, and delivers
    # messages through it (bypass: the flips land in the payload; marks drop frames)
    from integration.sources import BufferedLink, SourceConfig, make_link_source
    from protocol.modes import get_mode

    cfg = ConcatConfig(rate="800G", inner_decoder="hard", fec="bypass")
    generate_inner_trace(tmp_path / "t.trace", cfg, Pam4Awgn(snr_db=15.0), n_codewords=1200, seed=2)
    sc = SourceConfig(kind="trace", trace=str(tmp_path / "t.trace"), rate="800G")  # the trace's rate (400G: refused)
    src = make_link_source(sc, 0, 1)
    c = src.take_chunk(1 << 22)
    assert c.offsets.size > 0 and 0 <= c.lanes.min() and c.lanes.max() <= 3
    d = BufferedLink(make_link_source(sc, 0, 1), get_mode("bypass"), rate="800G").deliver(1 << 20)
    assert d.payload_flips.size > 0 and d.frames > 0
