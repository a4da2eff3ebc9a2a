"""Sweep plots (phy802.plots) and the two post-FEC BER definitions (decoder output vs payload after
the descrambler) in sweep rows and trace metadata."""

from __future__ import annotations

import pytest

from phy802 import plots
from phy802.sweep import DESCRAMBLER_FACTOR, SweepConfig, run_sweep

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_result():
    # kp4 at 1e-4 sees no codeword error in 2e4 words (a zero-error point = an upper bound);
    # bypass and none are the same process (their points coincide: the plots must spread them)
    cfg = SweepConfig(points=(1e-4, 2e-3, 3e-3), code=("kp4", "none"), fec=("ieee", "bypass"), target_errors=20,
                      max_codewords=20_000, max_seconds=20, seed=3)
    return run_sweep(cfg)


def test_plots_write_pngs_atomically(sweep_result, tmp_path):
    assert sweep_result.point("kp4/ieee", 1e-4).rates()["fer"].events == 0  # the bound case is exercised
    assert sweep_result.config.modes == ("kp4/ieee", "kp4/bypass", "none")
    plots.plot_ber_fer(sweep_result, tmp_path / "ber_fer.png")
    lat = {"kp4/ieee": 57.6, "kp4/bypass": 0.0, "none": 0.0}
    plots.plot_latency(sweep_result, lat.__getitem__, tmp_path / "latency.png")
    for name in ("ber_fer.png", "latency.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == PNG and len(data) > 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ber_fer.png", "latency.png"]  # no temp files left


def test_latency_rows_are_categorical_in_latency_order():
    # the y axis of latency.png is categorical: one row per mode, equal latencies on rows of their own
    lat = {"kp4": 57.6, "kr4": 56.8, "detect": 29.6, "bypass": 0.0, "none": 0.0}
    y = plots._latency_rows(list(lat), lat)
    assert sorted(y.values()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert y["kp4"] > y["kr4"] > y["detect"] > y["none"] > y["bypass"]  # ties keep the sweep's order


def test_channel_offsets_are_fixed_not_jitter():
    # inside a row each channel point has one fixed line, the same in every row: equal values line up
    off = plots._channel_offsets([3e-3, 1e-4, 1e-3])
    assert off[1e-4] > off[1e-3] > off[3e-3] and off[1e-4] - off[3e-3] == pytest.approx(0.6)
    assert plots._channel_offsets([2e-4]) == {2e-4: 0.0}


def test_mode_styles_distinct():
    styles = [plots.mode_style(i) for i in range(6)]
    assert len({s.marker for s in styles}) == 6 and len({s.color for s in styles}) == 6


def test_ber_ticks_nice_and_spaced():
    ticks = plots._ber_ticks(15.4, 18.3, min_gap=0.25)
    bers = [b for _, b in ticks]
    assert 1e-3 in bers and 1e-4 in bers
    snrs = [s for s, _ in ticks]
    assert all(b - a >= 0.25 for a, b in zip(snrs, snrs[1:]))


def test_log_limits_show_the_data():
    lo, hi = plots._log_limits([1e-9, 2e-3, 0.0, float("nan")], pad=2)
    assert lo == pytest.approx(5e-10) and hi == pytest.approx(4e-3)


def test_sweep_rows_carry_both_post_fec_bers(sweep_result):
    for p in sweep_result.points:
        row = p.row()
        assert row["payload_ber_source"] == "model"
        assert row["payload_ber"] == pytest.approx(min(1.0, DESCRAMBLER_FACTOR * row["post_fec_ber"]))
        assert row["payload_ber_lo"] <= row["payload_ber"] <= row["payload_ber_hi"]


def test_bitexact_link_measures_payload_ber():
    cfg = SweepConfig(points=(2e-3,), code="kp4", fec="bypass", simulator="link", target_errors=20, max_codewords=400,
                      max_seconds=20, seed=2)
    p = run_sweep(cfg).points[0]
    v, lo, hi, src = p.payload_ber()
    assert src == "measured"
    post = p.rates()["post_fec_ber"].value
    # the descrambler triples each error; 257b header hits spoil whole blocks (a bit more than 3x)
    assert 2.7 * post < v < 3.6 * post and lo <= v <= hi


@pytest.mark.parametrize("code,fec,ber", [("kp4", "bypass", 1e-4), ("kp4", "ieee", 2e-3), ("kp4", "detect_only", 1e-4),
                                          ("rs272", "ieee", 1e-3), ("none", "bypass", 1e-4)])
def test_trace_meta_carries_both_post_fec_bers(tmp_path, code, fec, ber):
    from protocol.trace import generate_trace

    meta = generate_trace(tmp_path / "t.npz", code=code, fec=fec, ber=ber, line_bits=1e7, seed=4)
    post = meta["post_fec"]
    dec = post["decoder_output"]
    assert dec["bit_errors"] > 100 and dec["bits"] > post["bits"]  # 257 vs 256 bits per block
    # payload flips ~= 3 x decoder-output errors (cancellations are rare; header hits are marks)
    assert 2.8 < post["bit_errors"] / dec["bit_errors"] < 3.05
    lo, hi = dec["ber_ci95"]
    assert lo <= dec["ber"] <= hi


def test_trace_decoder_errors_same_on_fused_and_general_bypass_paths():
    from protocol.trace.config import GeneratorConfig
    from protocol.trace.fast import FastGenerator

    counts = []
    for fused in (True, False):
        g = FastGenerator(GeneratorConfig("400G", "bypass", 3e-4), 7)
        g.fused = fused
        g.next_chunk(3000)
        counts.append((g.stats.decoder_bit_errors, g.stats.decoder_bits, g.stats.payload_flips))
    assert counts[0] == counts[1] and counts[0][0] > 0


def test_trace_decoder_errors_bitexact_matches_bypass_identity():
    from protocol.trace.bitexact import BitExactGenerator
    from protocol.trace.config import GeneratorConfig

    g = BitExactGenerator(GeneratorConfig("400G", "bypass", 2e-4), 5)
    g.next_chunk(300)
    st = g.stats
    # bypass: every line error on a message bit outside the AMs is a decoder-output error
    assert st.decoder_bit_errors > 0 and st.decoder_bits == st.stream_bits // 256 * 257
    assert 2.8 < st.payload_flips / st.decoder_bit_errors < 3.05


def test_latency_rows_never_overlap_in_crowded_sets():
    # 13 modes as in a sweep of kp4,rs272,none x all six receive modes: many rows at 0 and 4.6 ns
    lat = {"kp4/ieee": 57.6, "kp4/correct_no_indication": 49.6, "kp4/detect_only": 29.6, "kp4/bypass": 0.0,
           "kp4/unequal": 4.6, "kp4/llr": 57.6, "rs272/ieee": 30.8, "rs272/correct_no_indication": 26.8,
           "rs272/detect_only": 16.8, "rs272/bypass": 0.0, "rs272/unequal": 4.6, "rs272/llr": 30.8, "none": 0.0}
    y = plots._latency_rows(list(lat), lat)
    assert sorted(y.values()) == [float(i) for i in range(13)]
    order = sorted(lat, key=lambda m: y[m])
    assert [lat[m] for m in order] == sorted(lat.values())  # rows keep the latency order
    assert len({(s.marker, s.color) for s in map(plots.mode_style, range(13))}) == 13


def _trow(mode, ber, guard, ranks, step, pen, **extra):
    return {"parallel": "ddp", "mode": mode, "ber": ber, "guard": guard, "ranks": ranks, "step_ms": step,
            "loss_penalty": pen, **extra}


def _tradeoff_rows():
    rows = []
    for n, ref in ((8, 124.6), (64, 30.0)):
        rows += [_trow("kp4/ieee", 0.0, "-", n, ref, 0.0), _trow("kp4/ieee", 1e-5, "-", n, ref, 0.0),
                 _trow("kp4/llr", 0.0, "-", n, ref, 0.0),  # equal to the reference: must stay visible
                 _trow("kp4/bypass", 0.0, "-", n, ref * 0.99, 0.0),
                 _trow("kp4/detect_only", 1e-5, "-", n, ref * 2.39, 0.0),  # two far off scale, same x
                 _trow("kp4/bypass", 1e-5, "none", n, ref * 1.52, 1.99),
                 _trow("kp4/bypass", 1e-5, "nan_to_zero_clamp", n, ref * 1.52, 0.0285, future_field="x")]
    return rows


def test_pareto_layout_one_line_per_setting_shared_relative_axis():
    rows = _tradeoff_rows()
    lay = plots.pareto_layout(rows, clip_pct=10.0)
    keys = [(s["mode"], s["ber"], s["guard"]) for s in lay["settings"]]
    assert len(keys) == len(set(keys)) == 7  # every setting its own line: nothing can hide another
    assert keys[0] == ("kp4/ieee", 0.0, "-")  # the reference first
    assert lay["ref_ms"] == {("ddp", 8): 124.6, ("ddp", 64): 30.0}
    # one x axis for every size, relative to the reference: -1 % is -1 % at 8 and at 64 ranks
    i = keys.index(("kp4/bypass", 0.0, "-"))
    assert lay["pct"][(i, 8)] == pytest.approx(-1.0) and lay["pct"][(i, 64)] == pytest.approx(-1.0)
    # off-scale points are listed (drawn at the edge with their value), the axis keeps the rest readable
    off = {(keys[i][0], keys[i][2]) for i, _ in lay["off"]}
    assert off == {("kp4/detect_only", "-"), ("kp4/bypass", "none"), ("kp4/bypass", "nan_to_zero_clamp")}
    assert lay["xlim"][1] < 5 and lay["xlim"][0] < -1.0


def test_pareto_png_written(tmp_path):
    plots.plot_pareto(_tradeoff_rows(), tmp_path / "pareto.png")
    data = (tmp_path / "pareto.png").read_bytes()
    assert data[:8] == PNG and len(data) > 20_000
    assert [p.name for p in tmp_path.iterdir()] == ["pareto.png"]


def test_pareto_colours_readable_on_white():
    # no yellow / light markers: every BER colour has luminance below 0.6 (white = 1)
    from matplotlib.colors import to_rgb

    for c in plots._BER_COLORS:
        r, g, b = to_rgb(c)
        assert 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.6, c


def test_plots_say_what_their_axes_are(sweep_result, tmp_path, monkeypatch):
    # ber_fer.png has y-axis labels; latency.png's y axis says it is categorical (rows of modes)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = []
    monkeypatch.setattr(plots, "_save_png", lambda plt_, fig, path: seen.append(
        [(ax.get_ylabel(), ax.get_xlabel(), [t.get_text() for t in ax.get_yticklabels()]) for ax in fig.axes]))
    plots.plot_ber_fer(sweep_result, tmp_path / "a.png")
    plots.plot_latency(sweep_result, {"kp4/ieee": 57.6, "kp4/bypass": 0.0, "none": 0.0}.__getitem__,
                       tmp_path / "b.png")
    bf, lat = seen
    assert [y for y, _, _ in bf if y][:2] == ["post-FEC BER (wrong message bits / message bits)",
                                              "FER (wrong codewords / codewords)"]
    ylab, _, ticks = lat[0]
    assert ylab.startswith("receive mode, + added latency (model)") and "rows by latency" in ylab
    assert ticks == ["kp4/bypass\n+0.0 ns", "none\n+0.0 ns", "kp4/ieee\n+57.6 ns"]
    plt.close("all")
