"""The opening narrative of the demo's report.md is computed from the run's numbers."""

from __future__ import annotations

from phy802.cli._narrative import MEASURED_VS_MODEL, narrative


def _row(mode, x, codewords, cw_err, post, fer, fer_hi=None):
    return {"mode": mode, "axis": "ber", "x": x, "channel_ber": x, "pre_fec_ber": x, "codewords": codewords,
            "codeword_errors": cw_err, "fer": fer, "fer_hi": fer_hi if fer_hi is not None else fer * 1.2,
            "post_fec_ber": post, "post_fec_ber_lo": post * 0.9, "post_fec_ber_hi": post * 1.1}


def _summary(**over):
    s = {
        "vectors": {"passed": 16, "failed": 0, "files": []},
        "latency_ns": {"kp4": 57.6, "bypass": 0.0},
        "sweep": [_row("kp4", 3e-4, 200_000, 0, 0.0, 0.0, fer_hi=1.8e-5), _row("kp4", 1.5e-3, 16_256, 127, 2.4e-5, 7.8e-3),
                  _row("bypass", 3e-4, 128, 100, 3.1e-4, 0.78)],
        "trace": {"meta": {"fec": "bypass", "line_bits": 1e9, "pre_fec": {"ber": 1e-5},
                           "post_fec": {"ber": 3e-5, "decoder_output": {"ber": 1e-5}}}},
        "training": [{"parallel": "ddp", "ber": 0.0, "guard": "-", "final_val_loss": 2.5, "delta_val_loss": 0.0},
                     {"parallel": "ddp", "ber": 1e-5, "guard": "none", "final_val_loss": float("nan"),
                      "delta_val_loss": float("nan"), "nonfinite_steps": 7, "ber_is": "payload-stream BER",
                      "ber_delivered": 1.02e-5},
                     {"parallel": "ddp", "ber": 1e-5, "guard": "nan_to_zero_clamp", "final_val_loss": 2.52,
                      "delta_val_loss": 0.02, "nonfinite_steps": 0}],
    }
    s.update(over)
    return s


def test_narrative_reports_the_runs_numbers():
    text = "\n".join(narrative(_summary()))
    assert text.startswith("## What this run shows")
    assert "All 16 known-answer vector files passed" in text
    assert "no wrong codeword up to pre-FEC BER 0.0003 (0 of 200,000: FER < 1.8e-5)" in text
    assert "cuts the BER 62-fold" in text  # 1.5e-3 / 2.4e-5
    assert "passes the line errors through" in text
    assert "saves 57.6 ns" in text and "(model)" in text
    assert "payload BER 3e-5 after the descrambler (3.00x" in text
    assert ("guard `none` at BER 1e-5 given, of kind payload-stream BER (a setting); delivered payload BER 1.02e-5 "
            "(measured") in text and "loss n/a, diverged" in text and "7 steps with non-finite" in text
    assert ("guard `nan_to_zero_clamp` at BER 1e-5 given, of kind unknown (a setting); delivered payload BER not "
            "recorded: loss 2.52, stayed close to error-free (+0.020)") in text
    assert MEASURED_VS_MODEL in text


def test_narrative_follows_other_numbers():
    s = _summary(vectors={"passed": 14, "failed": 2, "files": [{"path": "a.txt", "ok": False}, {"path": "b.txt", "ok": False}]},
                 latency_ns={"kp4": 40.0, "bypass": 0.0}, training=[])
    text = "\n".join(narrative(s))
    assert "**2 of 16 known-answer vector files FAILED** (a.txt, b.txt)" in text
    assert "saves 40.0 ns" in text and "training" not in text.lower().replace("training below", "")
    assert "`phy802 train --source trace` replays" in text


def test_narrative_names_the_fastest_tradeoff_setting():
    rows = [{"mode": "kp4/ieee", "ber": 0.0, "guard": "-", "vs_ref": 1.0},
            {"mode": "kp4/bypass", "ber": 1e-5, "guard": "nan_to_zero_clamp", "vs_ref": 0.912},
            {"mode": "kp4/bypass", "ber": 1e-5, "guard": "none", "vs_ref": float("nan")}]
    text = "\n".join(narrative(_summary(tradeoff={"out": "x", "rows_64_ranks": rows})))
    assert ("fastest way to the target loss is, error-free: **kp4/ieee**, 1.000x the time of error-free KP4; "
            "at BER 1e-5: **kp4/bypass** with guard `nan_to_zero_clamp`, 0.912x") in text
    assert "1 of 3 settings never reach it (kp4/bypass `none` at 1e-5)" in text
