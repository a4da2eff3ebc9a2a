"""Regenerate vectors/fec_hist/example_* telemetry shapes (deterministic; SIMULATED, not measurements).

One known histogram -- 1e9 KP4 codewords drawn (seed 25) from phy802's exact codeword law of the
1-tap DFE model (PAM4 SER 2e-4, pb 0.5), one bin per corrected-symbol count 0..15, split over 4
lanes -- written in every shape ``phy802.telemetry.parsers`` reads; and a 64-port SONiC switch (two
``portstat -fh`` snapshots, 600 s apart in the story) with a known channel per port.
Run: ``python vectors/fec_hist/_gen/gen_fec_hist_vectors.py [OUTDIR]`` (tests check the files are reproduced).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from phy802 import theory  # noqa: E402
from phy802.telemetry.fit import CODES, sample_histogram  # noqa: E402

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "vectors" / "fec_hist"
KP4 = CODES["kp4"]
ORIGIN = ("SIMULATED by phy802 (not a measurement): vectors/fec_hist/_gen/gen_fec_hist_vectors.py, "
          "1e9 KP4 codewords from the DFE model ser=2e-4 pb=0.5, seed 25")
KNOWN = {"model": "dfe", "params": {"ser": 2e-4, "pb": 0.5}, "codewords": 10**9, "seed": 25, "lanes": 4}


def known():
    rng = np.random.default_rng(KNOWN["seed"])
    h = sample_histogram(KNOWN["model"], KNOWN["params"], KP4, KNOWN["codewords"], rng, source="known")
    lanes = [rng.multinomial(b.count, [0.25] * 4).tolist() for b in h.bins]
    return h, lanes


def write(name: str, text: str) -> None:
    (OUT / name).write_text(text, encoding="utf-8")


def commas(v: int) -> str:
    return f"{v:,}"


def shapes() -> None:
    h, lanes = known()
    corr = sum(b.count for b in h.bins[1:])
    unc = int(h.uncorrectable)
    # ethtool --json --include-statistics --show-fec eth0
    hist = [{"bin_low": b.low, "bin_high": b.high, "total": b.count, "lanes": ln} for b, ln in zip(h.bins, lanes)]
    dev = {"ifname": "eth0", "config": ["Auto"], "active": ["RS"],
           "statistics": {"corrected_blocks": {"total": corr}, "uncorrectable_blocks": {"total": unc}, "hist": hist}}
    write("example_kp4_ethtool.json", json.dumps([dev], indent=2) + "\n")
    # the text form of the same command
    lines = ["FEC parameters for eth0:", "Supported/Configured FEC encodings: Auto", "Active FEC encoding: RS",
             "Statistics:", f"  corrected_blocks: {corr}", f"  uncorrectable_blocks: {unc}"]
    for b, ln in zip(h.bins, lanes):
        lines.append(f"  fec_symbols_err_{b.low}: {b.count} [ per_lane: {', '.join(map(str, ln))} ]")
    write("example_kp4_ethtool.out", "\n".join(lines) + "\n")
    # the kernel's YNL form (ynl --spec ethtool.yaml --do fec-get)
    ynl = {"header": {"dev-index": 2, "dev-name": "eth0"},
           "stats": {"corrected": [corr], "uncorr": [unc],
                     "hist": [{"bin-low": b.low, "bin-high": b.high, "bin-val": b.count, "bin-val-per-lane": ln}
                              for b, ln in zip(h.bins, lanes)]}}
    write("example_kp4_ynl.json", json.dumps(ynl, indent=2) + "\n")
    # CSV
    write("example_kp4.csv", f"# {ORIGIN}\nbin,count\n" + "".join(f"{b.low},{b.count}\n" for b in h.bins)
          + f"uncorrectable,{unc}\n")
    # SONiC show interfaces counters fec-histogram Ethernet0 (no uncorrectable count in this table)
    rows = ["Symbol Errors Per Codeword    Codewords", "----------------------------  -----------"]
    rows += [f"{'BIN' + str(b.low):<28}  {b.count}" for b in h.bins]
    write("example_kp4_sonic_hist.out", "Ethernet0\n" + "\n".join(rows) + "\n")
    # SONiC portstat -fh, one port
    hdr = ["IFACE", "STATE"] + [f"BIN{i}" for i in range(16)]
    write("example_kp4_portstat.out", table([hdr, ["Ethernet0", "U"] + [commas(b.count) for b in h.bins]]))
    write("example_kp4_known.json", json.dumps({"generated_by": ORIGIN, **KNOWN,
                                                "true_fer": float(f"{theory_fer():.12g}"), "bins": [b.count for b in h.bins],
                                                "uncorrectable": unc}, indent=2) + "\n")


def theory_fer() -> float:
    from phy802.telemetry.fit import model_pmf

    return model_pmf(KNOWN["model"], KNOWN["params"], KP4).fer


def table(rows) -> str:
    w = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    out = ["  ".join(c.rjust(w[j]) if j >= 2 else c.ljust(w[j]) for j, c in enumerate(r)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(out) + "\n"


def switch_channels():
    """64 ports: most binomial at BER 2e-5..1.5e-4, some DFE, two Gilbert-Elliott, one bad lane."""
    rng = np.random.default_rng(64)
    chans = []
    for i in range(64):
        if i in (13, 42):
            chans.append(("ge", {"p_gb": 2e-4, "p_bg": 0.05, "e_g": 2e-5, "e_b": 0.02 if i == 13 else 0.01}))
        elif i % 5 == 0:
            chans.append(("dfe", {"ser": float(rng.uniform(1e-4, 4e-4)), "pb": float(rng.uniform(0.3, 0.7))}))
        else:
            ber = float(10 ** rng.uniform(np.log10(2e-5), np.log10(1.5e-4)))
            chans.append(("binomial", {"p_symbol": float(theory.symbol_error_prob(ber))}))
    return chans


def switch() -> None:
    chans = switch_channels()
    rng = np.random.default_rng(6464)
    hdr = ["IFACE", "STATE"] + [f"BIN{i}" for i in range(16)]
    old_rows, new_rows, truth = [hdr], [hdr], []
    for i, (m, p) in enumerate(chans):
        name = f"Ethernet{4 * i}"
        a = sample_histogram(m, p, KP4, 2 * 10**9, rng)
        b = sample_histogram(m, p, KP4, 10**9, rng)
        old = [x.count for x in a.bins]
        new = [x.count + y.count for x, y in zip(a.bins, b.bins)]
        old_rows.append([name, "U"] + [commas(v) for v in old])
        new_rows.append([name, "U"] + [commas(v) for v in new])
        from phy802.telemetry.fit import model_pmf

        truth.append({"port": name, "model": m, "params": p, "true_fer": float(f"{model_pmf(m, p, KP4).fer:.12g}")})
    write("example_switch64_portstat_t0.out", table(old_rows))
    write("example_switch64_portstat_t1.out", table(new_rows))
    write("example_switch64_truth.json", json.dumps({"generated_by": "SIMULATED by phy802 (not a measurement): "
                                                     "vectors/fec_hist/_gen/gen_fec_hist_vectors.py; t1 - t0 = 1e9 "
                                                     "codewords per port", "ports": truth}, indent=2) + "\n")


if __name__ == "__main__":
    shapes()
    switch()
