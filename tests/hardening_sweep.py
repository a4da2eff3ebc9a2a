"""The attack sweep: 1,000+ generated hostile command lines against phy802's writers and
readers, each run in-process in one arena folder (its own tmp folder: devices, FIFOs, sockets and
links are made there, never at a system path).  Every attack must be refused; the sweep counts

* files lost   -- an entry of the arena missing or changed after the command;
* tracebacks   -- a traceback or 'internal error' on stderr, or an exception out of ``main``;
* exit 3       -- an internal error on bad input;
* silent accepts -- exit 0 (or 1) where the input or output had to be refused (exit 2).

Run ``python tests/hardening_sweep.py`` (all attacks; ``--sample N`` for a random N of them,
``--seed``, ``--json``).  ``tests/unit/hardening/test_hardening_sweep.py`` runs a sample by
default and the whole sweep under ``-m slow``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import socket
import stat
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SENTINEL = b"the user's own bytes\n"
SWEEP = ["sweep", "--ber", "1e-3", "--code", "kp4", "--fec", "ieee", "--max-codewords", "2000",
         "--max-seconds", "1", "--workers", "1", "--no-progress"]


# ----------------------------------------------------------------------------- the arena

def build_arena(d: Path) -> dict:
    """User files, special files, phy802 outputs of every kind and forged markers; returns facts."""
    from phy802.runtime.output import output_set
    from phy802.cli import main

    d.mkdir(parents=True, exist_ok=True)
    old = os.getcwd()
    os.chdir(d)
    try:
        (d / "in.txt").write_text("1 2\n3 4\n")
        (d / "cw.txt").write_text("1 2 3 4\n")
        (d / "histo.csv").write_text("0,1000\n1,10\n2,1\n")
        for n in ("user.txt", "thesis.tex", "results.json", "FIT.json", "lanes.txt", "t.trace"):
            (d / n).write_bytes(SENTINEL)
        os.link(d / "user.txt", d / "hard.txt")
        (d / "link").symlink_to("user.txt")
        (d / "link_in").symlink_to("in.txt")
        (d / "dangling").symlink_to("nowhere.txt")
        (d / "loop").symlink_to("loop")
        os.mkfifo(d / "fifo")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(str(d / "sock"))
        finally:
            s.close()
        dev = True
        try:
            os.mknod(d / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except OSError:
            dev = False
        (d / "userdir").mkdir()
        for n in ("tradeoff.csv", "pareto.png", "result.json", "params.pt", "report.md", "sweep.csv",
                  "sweep.json", "notes.txt", "table.csv"):
            (d / "userdir" / n).write_bytes(SENTINEL)
        (d / "linkdir").symlink_to("userdir")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(SWEEP + ["--out", "s1"]) == 0
            assert main(SWEEP + ["--seed", "2", "--out", "s2"]) == 0
        with output_set(d / "vecs", "vectors") as tmp:
            for sub in ("rs", "pcs", "pma"):
                (tmp / sub).mkdir()
                (tmp / sub / "kat.txt").write_bytes(SENTINEL)
        with output_set(d / "gen", "sweep") as tmp:
            (tmp / "thesis.tex").write_bytes(b"old")
        for name in ("victim_copied", "victim_edited", "victim_old", "victim_exp"):
            (d / name).mkdir()
            (d / name / "thesis.tex").write_bytes(SENTINEL)
        shutil.copy(d / "gen" / ".phy802-output", d / "victim_copied" / ".phy802-output")
        m = json.loads((d / "s1" / ".phy802-output").read_text())
        m["files"]["thesis.tex"] = m["files"]["sweep.csv"]
        (d / "victim_edited" / ".phy802-output").write_text(json.dumps(m))
        (d / "victim_old" / ".phy802-output").write_text("thesis.tex\n")
        (d / "victim_exp" / ".phy802-experiment").write_text(json.dumps({"files": ["thesis.tex"]}))
        shutil.copytree(d / "s1", d / "s1_edited")
        (d / "s1_edited" / "sweep.csv").write_bytes(SENTINEL)
        from protocol.trace import generate_trace

        generate_trace(d / "good.trace", code="rs272", fec="ieee", ber=2e-3, line_bits=2e6, seed=1, progress=False)
    finally:
        os.chdir(old)
    return {"dev": dev}


def snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", zlib.crc32(p.read_bytes()), st.st_size)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


# ----------------------------------------------------------------------------- the attacks

def _spell(name: str, arena: Path) -> list[str]:
    return [name, f"./{name}", os.path.join(str(arena), name)] if name not in ("", ".", "..") else [name]


def _trace_with_meta(arena: Path, name: str, edit, src: str = "good.trace") -> str:
    """``arena/src`` with its metadata edited by ``edit`` and the trailer's CRC recomputed (a tamperer's
    edit), written to ``arena/inputs/name``."""
    from protocol.trace.format import _TRAILER_BYTES, TRAILER_MAGIC
    import numpy as np

    data = (arena / src).read_bytes()
    tr = data[-_TRAILER_BYTES:]
    i_off, n_ch, m_off, m_len, _ = (int(x) for x in np.frombuffer(tr[8:], "<u8"))
    ib = data[i_off:m_off]
    meta = json.loads(data[m_off:m_off + m_len])
    edit(meta)
    mb = json.dumps(meta).encode()
    trailer = np.array([i_off, n_ch, m_off, len(mb), zlib.crc32(mb, zlib.crc32(ib))], "<u8")
    p = arena / "inputs" / name
    p.write_bytes(data[:m_off] + mb + TRAILER_MAGIC + trailer.tobytes())
    return str(p)


def attacks(arena: Path, facts: dict) -> list[tuple[str, list[str]]]:
    """``(label, argv)`` of every attack; each must exit 2 and leave the arena as it was."""
    (arena / "inputs").mkdir(exist_ok=True)
    out: list[tuple[str, list[str]]] = []
    # 1-2, 16: single-file writers x hostile --out targets x three spellings of the path
    writers = {
        "fec-encode": ["fec", "encode", "--n", "4", "--k", "2", "in.txt"],
        "fec-decode": ["fec", "decode", "--n", "4", "--k", "2", "cw.txt"],
        "fec-encode-json": ["fec", "encode", "--n", "4", "--k", "2", "--json", "in.txt"],
        "fec-tail": ["fec", "tail", "histo.csv", "--models", "binomial", "--bootstrap", "0"],
        "pcs-tx": ["pcs", "tx", "--frames", "2"],
        "trace-generate": ["trace", "generate", "--bits", "1e5", "--no-progress"],
    }
    targets = ["fifo", "sock", "link", "link_in", "dangling", "loop", "user.txt", "hard.txt", "thesis.tex",
               "results.json", "FIT.json", "lanes.txt", "t.trace", "userdir", "userdir/notes.txt", "s1/sweep.csv",
               "linkdir/notes.txt", "user.txt/x", "newd/", "userdir/", ".", ".."] + (["dev"] if facts["dev"] else [])
    inputs = {"fec-encode": "in.txt", "fec-decode": "cw.txt", "fec-encode-json": "in.txt", "fec-tail": "histo.csv"}
    for w, argv in writers.items():
        for t in targets + ([inputs[w]] if w in inputs else []):
            for sp in _spell(t, arena):
                out.append((f"{w} --out {t}", argv + ["--out", sp]))
        out.append((f"{w} --out ''", argv + ["--out", ""]))
        out.append((f"{w} --out=", argv + ["--out="]))
    # 3-5, 16: folder writers x hostile --out folders
    folders = {
        "sweep": SWEEP,
        "sweep-merge": ["sweep", "--merge", "s1", "s2", "--no-progress"],
        "vectors": ["vectors", "generate", "--no-progress"],
        "tradeoff": ["tradeoff", "--results", "nosuch"],
        "demo": ["demo", "--no-train", "--quick", "--no-progress"],
    }
    ftargets = ["userdir", "linkdir", "fifo", "sock", "user.txt", "link", "gen/thesis.tex", "victim_copied",
                "victim_edited", "victim_old", "victim_exp", "s1_edited", ".", "..", ""] + (["dev"] if facts["dev"] else [])
    for f, argv in folders.items():
        for t in ftargets + (["vecs"] if f != "vectors" else ["s1"]) + (["s1", "s2"] if f == "sweep-merge" else []):
            for sp in _spell(t, arena):
                out.append((f"{f} --out {t}", argv + ["--out", sp]))
    # 11: sweep files with wrong-typed, missing or extra fields (and JSON nested deeply)
    base = json.loads((arena / "s1" / "sweep.json").read_text())
    bad_values = ["x", [1], {"a": 1}, -1, 2 ** 64, None, 1.5, True]
    k = 0

    def sweep_file(doc) -> str:
        nonlocal k
        k += 1
        p = arena / "inputs" / f"sw{k}.json"
        p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return str(p)

    for key in list(base):
        doc = dict(base)
        del doc[key]
        if key not in ("merged_from", "timing"):
            out.append((f"sweep.json without {key}", ["sweep", "--merge", sweep_file(doc), "s2", "--out", "mnew"]))
    out.append(("sweep.json extra key", ["sweep", "--merge", sweep_file({**base, "extra": 1}), "s2", "--out", "mnew"]))
    counters = base["points"][0]["counters"]
    for field in counters:
        for v in bad_values:
            if field == "seconds" and v in (1.5, 2 ** 64):
                continue  # a valid duration
            doc = json.loads(json.dumps(base))
            doc["points"][0]["counters"][field] = v
            out.append((f"sweep.json counters.{field}={v!r}",
                        ["sweep", "--merge", sweep_file(doc), "s2", "--out", "mnew"]))
    for field in ("axis", "code", "fec", "rate", "points", "n_lanes", "precoding", "simulator", "seed"):
        for v in ("x", {"a": 1}, -1, [[1]]):
            doc = json.loads(json.dumps(base))
            doc["config"][field] = v
            out.append((f"sweep.json config.{field}={v!r}", ["sweep", "--merge", sweep_file(doc), "s2", "--out", "mnew"]))
    for field in ("mode", "x", "snr_db", "stop_reason", "counters", "axis"):
        for v in ([1], {"a": 1}, None, 10 ** 400 if field in ("x", "snr_db") else -5):
            doc = json.loads(json.dumps(base))
            doc["points"][0][field] = v
            out.append((f"sweep.json points[0].{field}={str(v)[:20]}",
                        ["sweep", "--merge", sweep_file(doc), "s2", "--out", "mnew"]))
    out.append(("sweep.json with no points", ["sweep", "--merge", sweep_file({**base, "points": []}), "s2", "--out", "mnew"]))
    reseeded = json.loads(json.dumps(base))  # one run given twice, its seed edited
    reseeded["config"]["seed"] = base["config"]["seed"] + 1000
    out.append(("sweep.json one run twice", ["sweep", "--merge", sweep_file(base), sweep_file(reseeded), "--out", "mnew"]))
    for depth in (100, 1000, 100000):
        out.append((f"sweep.json depth {depth}", ["sweep", "--merge", sweep_file("[" * depth + "]" * depth), "s2",
                                                   "--out", "mnew"]))
        out.append((f"sweep.json config depth {depth}", ["sweep", "--merge", sweep_file(
            json.dumps({**base, "config": None}).replace("null", "[" * depth + "]" * depth)), "s2", "--out", "mnew"]))
    for special in ("/dev/zero", "fifo", "sock", "userdir", "dangling"):
        out.append((f"sweep --merge {special}", ["sweep", "--merge", special, "s2", "--out", "mnew"]))
    # 11: trace metadata with wrong-typed or missing fields
    from protocol.trace.format import _SUMMARY_FIELDS

    per_kind = {"count": ["x", -1, 1.5, 2 ** 64, [1], None], "number": ["x", [1], {"a": 1}, None],
                "name": [7, [1], {"a": 1}, None], "counts": ["x", [1.5], [-1], 3, {"a": 1}],
                "pair": ["x", [1], [1, "x"], 3], "object": ["x", [1, 2], 3, None]}
    j = 0
    for name, kind, required in _SUMMARY_FIELDS:
        for v in per_kind[kind]:
            def edit(m, name=name, v=v):
                node = m
                parts = name.split(".")
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                node[parts[-1]] = v
            j += 1
            path = _trace_with_meta(arena, f"m{j}.trace", edit)
            out.append((f"trace meta {name}={v!r}", ["trace", "info", path]))
            if j % 3 == 0:
                out.append((f"trace meta {name}={v!r} ethtool", ["trace", "info", path, "--format", "ethtool-json"]))
        if required:
            def drop(m, name=name):
                node = m
                parts = name.split(".")
                for p in parts[:-1]:
                    node = node[p]
                del node[parts[-1]]
            j += 1
            out.append((f"trace meta without {name}", ["trace", "info", _trace_with_meta(arena, f"m{j}.trace", drop)]))
    out.append(("trace meta code rs999", ["trace", "info", _trace_with_meta(arena, "c.trace",
                                                                          lambda m: m.update(code="rs999"))]))
    for special in ("/dev/zero", "fifo", "userdir", "user.txt", "dangling"):
        out.append((f"trace info {special}", ["trace", "info", special]))
    # fec codeword files: tokens the README forbids, binary, endless input
    tokens = ["1_0", "+5", "\u0663", "0x3", "1e3", "1024", "-1", "1.0", "nan", "", "\x00", "99999999999999999999"]
    for action, n in (("encode", 2), ("decode", 4)):
        for i, tok in enumerate(tokens):
            for pos in range(2):
                words = ["1"] * n
                words[pos] = tok
                p = arena / "inputs" / f"fec_{action}_{i}_{pos}.txt"
                p.write_text(" ".join(words) + "\n")
                if tok == "":
                    p.write_text(" ".join(words[:-1]) + "\n")  # one symbol short
                out.append((f"fec {action} token {tok!r}", ["fec", action, "--n", "4", "--k", "2", str(p)]))
        # (a FIFO is read as a stream, as 'cat' reads one: it waits for a writer, so it is not an attack)
        for special in ("/dev/zero", "userdir", "dangling", "sock"):
            out.append((f"fec {action} {special}", ["fec", action, special]))
    # pcs rx: special and corrupt lanes files
    for i, blob in enumerate([b"PK\x03\x04" + b"\x00" * 20, b"\x89PNG\r\n\x1a\n", b"kind=lane row=0 symbols=1,2\n",
                              b"kind=config rate=999G\n", b""]):
        p = arena / "inputs" / f"lanes{i}{'.npz' if i < 2 else '.txt'}"
        p.write_bytes(blob)
        out.append((f"pcs rx corrupt {i}", ["pcs", "rx", str(p)]))
    for special in ("/dev/zero", "fifo", "userdir", "dangling"):
        out.append((f"pcs rx {special}", ["pcs", "rx", special]))
    # token folders of another layout than nanoGPT's little-endian uint16 (they trained without a word)
    import numpy as np

    ids = (np.arange(40_000) * 7919) % 97  # a character vocabulary's ids
    layouts = {"uint32": ids.astype("<u4").tobytes(), "uint32be": ids.astype(">u4").tobytes(),
               "uint8": ids.astype("u1").tobytes(), "uint16be": ids.astype(">u2").tobytes(),
               "llmc": np.array([20240520, 1, len(ids)] + [0] * 253, "<i4").tobytes() + ids.astype("<u2").tobytes()}
    for name, blob in layouts.items():
        d = arena / "inputs" / f"tokens_{name}"
        d.mkdir(exist_ok=True)
        for split in ("train.bin", "val.bin"):
            (d / split).write_bytes(blob)
        out.append((f"train --data {name} token files", ["train", "--data", str(d), "--steps", "1"]))
    # 16: meaningless option combinations this engineer's commands must refuse
    out.append(("sweep --plot without --out", SWEEP + ["--plot"]))
    out.append(("sweep --merge one file into its own folder", ["sweep", "--merge", "s1/sweep.json", "s2", "--out", "s1"]))
    out.extend(link_fec_attacks(arena))
    out += cluster_cli_attacks(arena)  # block: the cluster / trade-off command line
    return out


# ----------------------------------------------------------------------------- block: cluster / trade-off CLI
# (collective, tradeoff, nccl-tests files)

def _nccl_text(rows, *, edit=None) -> str:
    """A 2 x 8 all_reduce_perf output as nccl-tests prints it; ``edit(lines)`` changes it."""
    lines = ["# Collective test starting: all_reduce_perf", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r} on {'ab'[r // 8]:>6} device {r % 8} [0x{r:02x}] NVIDIA H100"
              for r in range(16)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
                 "   busbw #wrong")
    for size, t in rows:
        alg = size / (t * 1e3)
        bus = alg * 2 * 15 / 16
        lines.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {t:8.2f} {alg:7.2f} {bus:7.2f}      0 "
                     f"{t:8.2f} {alg:7.2f} {bus:7.2f}      0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.45"]
    if edit is not None:
        edit(lines)
    return "\n".join(lines) + "\n"


def cluster_cli_attacks(arena: Path) -> list[tuple[str, list[str]]]:
    """Hostile collective / tradeoff command lines and nccl-tests / results files: each must exit 2."""
    d = arena / "inputs"
    out: list[tuple[str, list[str]]] = []
    rows = [(32768, 30.0), (1048576, 62.0), (268435456, 1300.0)]
    at = 19  # the first data row (after 2 header lines, 16 rank lines and the column header)

    def row0(tok: str):
        def edit(lines):
            lines[at] = f"{tok:>12}" + lines[at][12:]
        return edit

    def wrong(lines):
        lines[at] = lines[at][:-1] + "7"

    def oob(lines):
        lines[-2] = "# Out of bounds values : 7 FAILED"

    def zero_only(lines):
        del lines[at + 1:at + 3]
        lines[at] = f"{0:>12} {0:>13}     float     sum      -1    25.00    0.00    0.00      0    25.00    0.00    0.00      0"

    files = {"size-fraction": row0("32768.7"), "size-underscore": row0("32_768"), "size-plus": row0("+32768"),
             "size-arabic": row0("\u0663\u0662\u0667\u0666\u0668"), "size-exponent": row0("3.2768e4"),
             "wrong-results": wrong, "out-of-bounds": oob, "zero-bytes-only": zero_only}
    for name, edit in files.items():
        p = d / f"nccl_{name}.txt"
        p.write_text(_nccl_text(rows, edit=edit), encoding="utf-8")
        out.append((f"collective --nccl-tests {name}", ["collective", "--nccl-tests", str(p)]))
    good = d / "nccl_good.txt"
    good.write_text(_nccl_text(rows))
    for special in ("/dev/zero", "fifo", "sock", "userdir", "dangling", "loop"):
        out.append((f"collective --nccl-tests {special}", ["collective", "--nccl-tests", special]))
    out.append(("collective --calibrate ''", ["collective", "--nccl-tests", str(good), "--calibrate", ""]))
    for t in ("user.txt", "link", "fifo", "userdir", str(good)):
        out.append((f"collective --calibrate {t}", ["collective", "--nccl-tests", str(good), "--calibrate", t]))
    out.append(("collective --nccl-tests ''", ["collective", "--nccl-tests", ""]))
    big = ["collective", "--nodes", "1000", "--trials", "1400000", "--ber", "1e-4", "--fec", "bypass", "--bytes", "1e9"]
    out.append(("collective trials past the time budget", big))
    out.append(("collective 366,912-row product", [
        "collective", "--bytes", ",".join(str(8 << i) for i in range(28)), "--ber",
        ",".join(f"{k}e-9" for k in range(1, 14)), "--fec", "ieee,bypass,llr,detect_only,unequal,correct_no_indication",
        "--code", "kp4,kr4,rs272", "--ranks", ",".join(str(16 * k) for k in range(1, 57))]))
    for off in ("-1000", "-100"):
        out.append((f"collective --latency-offset-us {off}", ["collective", "--latency-offset-us", off]))
    out.append(("collective --code none --fec ieee", ["collective", "--code", "none", "--fec", "ieee"]))
    out.append(("collective --code kp4,none --fec ieee", ["collective", "--code", "kp4,none", "--fec", "ieee"]))
    out.append(("collective --trials 0 at BER > 0", ["collective", "--fec", "bypass", "--ber", "1e-6", "--trials", "0"]))
    # calibration files (--calibration): another version, a key given twice (JSON keeps the last), an
    # absurd bandwidth factor, negative shifts that make a modelled time negative
    cal = {"format": "phy802-calibration", "version": 2, "net_efficiency": 0.9, "latency_offset_us": 3.0,
           "algo_latency_us": {}, "algo_bw_factor": {}, "sustained_busbw_GBps": None}
    cals = {"version-9": json.dumps({**cal, "version": 9}), "version-true": json.dumps({**cal, "version": True}),
            "duplicate-key": json.dumps(cal).replace('"latency_offset_us": 3.0', '"latency_offset_us": 3.0, '
                                                     '"latency_offset_us": 46940.0'),
            "bw-factor-1e4": json.dumps({**cal, "algo_bw_factor": {"ring": 1e4}}),
            "latency-offset-negative": json.dumps({**cal, "latency_offset_us": -1000.0}),
            "algo-latency-negative": json.dumps({**cal, "algo_latency_us": {"tree": -500.0}})}
    for name, text in cals.items():
        p = d / f"cal_{name}.json"
        p.write_text(text)
        out.append((f"collective --calibration {name}", ["collective", "--calibration", str(p), "--bytes", "8192"]))
    out.append(("tradeoff --calibration latency-offset-negative",
                ["tradeoff", "--results", str(d / "res_good"), "--out", "tnew", "--modes", "kp4:ieee", "--trials", "5",
                 "--calibration", str(d / "cal_latency-offset-negative.json")]))
    # tradeoff: results files and options that would be ignored or contradict each other
    ok = [dict(parallel="ddp", ber=0.0, guard="-", evals=[[0, 4.0], [10, 2.0]], final_val_loss=2.0),
          dict(parallel="ddp", ber=1e-6, guard="-", evals=[[0, 4.0], [10, 2.1]], final_val_loss=2.1)]
    bad_results = {"no-rows": [], "loss-string": [dict(ok[0], final_val_loss="2.0")],
                   "loss-list": [dict(ok[0], final_val_loss=[2.0])], "eval-string": [dict(ok[0], evals=[[0, "x"]])],
                   "step-bool": [dict(ok[0], evals=[[True, 2.0]])], "ber-string": [ok[0], dict(ok[1], ber="1e-6")],
                   "ber-half": [ok[0], dict(ok[1], ber=0.5)]}
    for name, rs in bad_results.items():
        p = d / f"res_{name}"
        p.mkdir()
        (p / "results.json").write_text(json.dumps({"meta": {"fec": "bypass"}, "rows": rs}))
        out.append((f"tradeoff --results {name}", ["tradeoff", "--results", str(p), "--out", "tnew", "--ranks", "8"]))
    good_res = d / "res_good"
    good_res.mkdir()
    (good_res / "results.json").write_text(json.dumps({"meta": {"fec": "bypass"}, "rows": ok}))
    tr = ["tradeoff", "--results", str(good_res), "--out", "tnew", "--modes", "kp4:ieee", "--trials", "5"]
    for label, extra in (("--nodes 32 --ranks 64", ["--nodes", "32", "--ranks", "64"]),
                         ("--bers with --results", ["--bers", "1e-7"]), ("--steps with --results", ["--steps", "5"]),
                         ("preset and --layers disagree", ["--model", "llama3-8b", "--layers", "40"]),
                         ("preset and --params disagree", ["--model", "gpt2-124m", "--params", "7e9"]),
                         ("model flags incomplete", ["--params", "7e9"]),
                         ("--tokens-per-step and --batch-size", ["--tokens-per-step", "1e6", "--batch-size", "8"]),
                         ("--target-loss and --target-rel", ["--target-loss", "2", "--target-rel", "0.1"]),
                         ("--pp-stages with no pipeline", ["--pp-stages", "4"]),
                         ("--latency-offset-us -1000", ["--latency-offset-us", "-1000"]),
                         ("--trials on flat-ethernet", ["--cluster", "flat-ethernet"])):
        out.append((f"tradeoff {label}", tr + extra))
    return out


# ----------------------------------------------------------------------------- block: link/FEC readers

#: an argv starting with this runs with standard input closed (Python's sys.stdin is None, as under 'CMD <&-')
CLOSED_STDIN = "<&-"


def link_fec_attacks(arena: Path) -> list[tuple[str, list[str]]]:
    """The hostile inputs of the link engineer's readers: closed stdin, endless devices, FIFOs and
    link loops where a file is read, telemetry whose counters contradict each other or mix two commands'
    output, format names forced on the other shape, hex read as decimal, cut xxd pastes, tampered trace
    metadata, a --from-fit the trace generator cannot draw."""
    inp = arena / "inputs"
    out: list[tuple[str, list[str]]] = []
    for argv in (["fec", "encode", "-"], ["fec", "decode"], ["fec", "tail", "-"], ["fec", "decode", "--code", "c177", "-"],
                 ["fec", "encode", "--code", "c177", "-"]):
        out.append((f"closed stdin: {' '.join(argv)}", [CLOSED_STDIN, *argv]))
    for argv in (["fec", "tail"], ["vectors", "verify"], ["trace", "info"]):
        for special in ("/dev/zero", "fifo", "loop", "sock", "userdir"):
            if (argv[0] == "fec" and special == "fifo") or (argv[0] == "vectors" and special == "userdir"):
                continue  # fec tail reads a FIFO as 'cat' does (it waits for a writer); verify checks a folder's files
            out.append((f"{' '.join(argv)} {special}", [*argv, special]))
    for special in ("fifo", "loop", "/dev/zero", "userdir", "dangling"):
        out.append((f"trace generate --from-fit {special}", ["trace", "generate", "--from-fit", special, "--bits", "1e5",
                                                             "--no-progress", "--out", "new.trace"]))
    out.append(("trace generate 800G without noise", ["trace", "generate", "--rate", "800G", "--path", "exact",
                                                      "--bits", "1e6", "--no-progress", "--out", "new.trace"]))
    fit = inp / "ge_fit.json"
    fit.write_text(json.dumps({"format": "phy802.fec_tail_fit", "best": "ge", "models": {
        "ge": {"aic": 1.0, "params": {"p_gb": 1e-3, "p_bg": 0.1, "e_g": 1e-6, "e_b": 0.1},
               "predicted": {"pre_fec_ber": {"value": 1e-4}}}}}))
    out.append(("trace generate --from-fit ge best", ["trace", "generate", "--from-fit", str(fit), "--bits", "1e5",
                                                       "--no-progress", "--out", "new.trace"]))
    # telemetry: contradictory counters, two commands' output in one file, a diff of nothing, the other shape
    hist = [{"bin_low": i, "bin_high": i, "total": c} for i, c in enumerate((10**9, 2 * 10**8, 4 * 10**7))]
    texts = {
        "corrected5.json": json.dumps([{"ifname": "eth0", "statistics": {"corrected_blocks": {"total": 5}, "hist": hist}}]),
        "sonic_then_portstat.txt": "Ethernet0\nBIN0  1000\nBIN1  10\nBIN2  1\n"
                                   "IFACE  STATE  BIN0  BIN1  BIN2\nEthernet4  U  100  10  1\n",
        "prompt_only.txt": "admin@sonic:~$ show interfaces counters fec-histogram Ethernet0\n",
        "switch.txt": "IFACE  STATE  BIN0  BIN1  BIN2\nEthernet0  U  1,000  10  1\nEthernet4  U  2,000  20  2\n",
        "ynl.json": json.dumps({"stats": {"hist": [{"bin-low": 0, "bin-high": 0, "bin-val": 1000},
                                                   {"bin-low": 1, "bin-high": 1, "bin-val": 10}]}}),
    }
    for name, text in texts.items():
        (inp / name).write_text(text)
    tail = ["fec", "tail", "--models", "binomial", "--bootstrap", "0", "--no-progress"]
    for name in ("corrected5.json", "sonic_then_portstat.txt", "prompt_only.txt"):
        out.append((f"fec tail {name}", [*tail, str(inp / name)]))
    out.append(("fec tail switch --since itself", [*tail, str(inp / "switch.txt"), "--since", str(inp / "switch.txt")]))
    out.append(("fec tail ynl --format ethtool-json", [*tail, str(inp / "ynl.json"), "--format", "ethtool-json"]))
    out.append(("fec tail --gof-level 0", [*tail, str(inp / "switch.txt"), "--gof-level", "0"]))
    # codeword pastes: hex read as decimal, a cut xxd dump, a partial packed word
    (inp / "hex4.txt").write_text("0c0 1ff 3a 2\n")
    (inp / "xxd_cut.txt").write_text("00000000: 0102 0304  ....\n00000010: 0506 0708  ....\n")
    (inp / "xxd_part.txt").write_text("00000000: 0102 0304 0506  ......\n")  # 48 bits: one 40-bit word and 8 more
    (inp / "xxd_i_cut.txt").write_text("unsigned char c_bin[] = {\n  0x01, 0x02, 0x03, 0x04, 0x05\n};\n"
                                       "unsigned int c_bin_len = 10;\n")  # a line of the C array lost
    (inp / "xxd_i_open.txt").write_text("unsigned char c_bin[] = {\n  0x01, 0x02, 0x03, 0x04, 0x05,\n")  # no '};'
    out.append(("fec decode hex as decimal", ["fec", "decode", "--n", "4", "--k", "2", str(inp / "hex4.txt")]))
    for name in ("xxd_cut.txt", "xxd_part.txt", "xxd_i_cut.txt", "xxd_i_open.txt"):
        out.append((f"fec decode --format hex {name}", ["fec", "decode", "--n", "4", "--k", "2", "--format", "hex",
                                                         str(inp / name)]))
    # trace metadata a tamperer edits, trailer CRC recomputed: an unknown rate, 800G inner metadata on a 400G trace
    for label, edit in (("rate 3.2T", lambda m: m.update(rate="3.2T")),
                        ("inner on 400G", lambda m: m.update(inner={"code": "c999", "counters": {"inner_failed": -5}}))):
        path = _trace_with_meta(arena, f"t46_{label.replace(' ', '_')}.trace", edit)
        out.append((f"trace meta {label} --check", ["trace", "info", path, "--check"]))
    # the same on an 800G trace (format 2.1, its inner-code metadata): what a tamperer edits there
    _inner_trace(arena / "inputs" / "dj800.trace")
    for label, edit in (("800G rate 3.2T", lambda m: m.update(rate="3.2T")),
                        ("800G inner.code c999", lambda m: m["inner"].update(code="c999")),
                        ("800G inner_failed -5", lambda m: m["inner"]["counters"].update(inner_failed=-5)),
                        ("800G fer -0.1", lambda m: m["inner"]["rates"]["fer"].update(value=-0.1)),
                        ("800G inner removed", lambda m: m.pop("inner"))):
        path = _trace_with_meta(arena, f"t46_{label.replace(' ', '_')}.trace", edit, src="inputs/dj800.trace")
        out.append((f"trace meta {label} --check", ["trace", "info", path, "--check"]))
    # SONiC pastes with CRLF line ends (read since CRLF no longer passes for CSV): the mixes still refused
    sonic = ("Ethernet0\nSymbol Errors Per Codeword  Codewords\n--------------------------  --------------\n"
             "BIN0  1000000\nBIN1  5000\nBIN2  12\n")
    table = "IFACE  STATE  BIN0  BIN1  BIN2\nEthernet4  U  100  10  1\n"
    for name, text in (("crlf_sonic_then_portstat.txt", sonic + table), ("crlf_portstat_then_sonic.txt", table + sonic),
                       ("crlf_prompt_only.txt", "admin@sonic:~$ show interfaces counters fec-histogram Ethernet0\n")):
        (inp / name).write_bytes(text.replace("\n", "\r\n").encode())
        out.append((f"fec tail {name}", [*tail, str(inp / name)]))
    # a fit where no law passes its goodness-of-fit test, replayed without --fit-model naming a law
    (inp / "nofit.json").write_text(_no_fit_json())
    out.append(("trace generate --from-fit no_fit", ["trace", "generate", "--from-fit", str(inp / "nofit.json"),
                                                     "--bits", "1e5", "--no-progress", "--out", "new.trace"]))
    return out


def _inner_trace(path: Path) -> None:
    """A small 800G trace (KP4 + Clause 177 inner code) at ``path``, for the metadata tampering attacks."""
    from phy802.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["trace", "generate", "--rate", "800G", "--snr-db", "16", "--bits", "2e5", "--seed", "1",
                   "--out", str(path), "--no-progress"])
    if rc != 0:
        raise RuntimeError(f"could not build the 800G trace the sweep tampers with (exit {rc})")


def _no_fit_json() -> str:
    """``fec tail --out``'s document for a histogram with a second hump no law draws (every law rejected)."""
    from phy802.telemetry.bins import FecBin, FecHistogram
    from phy802.telemetry.fit import CODES, fit_histogram

    hump = FecHistogram(tuple(FecBin(i, i, c) for i, c in enumerate([10**8, 50000, 0, 40000, 0, 0])), source="hump")
    fit = fit_histogram(hump, CODES["kp4"], models=("binomial", "dfe"), bootstrap=0)
    assert fit.verdict["status"] == "no_fit", fit.verdict
    return json.dumps(fit.as_dict(), allow_nan=False)


# ----------------------------------------------------------------------------- the run

def run_one(argv: list[str], arena: Path) -> tuple[int | None, str]:
    from phy802.cli import main

    import signal

    err, outbuf = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(arena)
    old_stdin = sys.stdin
    if argv[:1] == [CLOSED_STDIN]:
        argv, sys.stdin = argv[1:], None

    def hang(signum, frame):
        raise TimeoutError("attack still running after 60 s (a hang)")

    prev = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(outbuf):
            try:
                rc = main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException as exc:  # noqa: BLE001 - counted as a traceback
                import traceback

                return None, err.getvalue() + "".join(traceback.format_exception(exc))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, prev)
        os.chdir(old)
        sys.stdin = old_stdin
    return rc, err.getvalue()


def sweep(sample: int | None = None, seed: int = 1, verbose: bool = False) -> dict:
    work = Path(tempfile.mkdtemp(prefix="phy802-attacks-"))
    old_state = os.environ.get("PHY802_STATE_DIR")
    os.environ["PHY802_STATE_DIR"] = str(work / "state")
    try:
        arena = work / "arena"
        facts = build_arena(arena)
        cases = attacks(arena, facts)
        n_all = len(cases)
        if sample is not None and sample < len(cases):
            cases = random.Random(seed).sample(cases, sample)
        report = {"attacks": len(cases), "generated": n_all, "files_lost": 0, "tracebacks": 0, "exit_3": 0,
                  "silent_accepts": 0, "failures": []}
        t0 = time.monotonic()
        before = snapshot(arena)
        for label, argv in cases:
            rc, err = run_one(argv, arena)
            after = snapshot(arena)
            problems = []
            lost = [k for k, v in before.items() if after.get(k) != v]
            if lost:
                report["files_lost"] += 1
                problems.append(f"changed/lost {lost[:3]}")
            if rc is None or "Traceback" in err or "internal error" in err:
                report["tracebacks"] += 1
                problems.append("traceback")
            if rc == 3:
                report["exit_3"] += 1
                problems.append("exit 3")
            if rc in (0, 1):
                report["silent_accepts"] += 1
                problems.append(f"exit {rc}")
            if problems:
                report["failures"].append({"attack": label, "argv": argv, "rc": rc, "problems": problems,
                                           "stderr": err.strip()[-300:]})
                if verbose:
                    print(f"FAIL {label}: {problems} {err.strip()[-200:]}", file=sys.stderr)
            if after != before:  # new files from a wrongly accepted attack: put the arena back
                shutil.rmtree(arena, ignore_errors=True)
                facts = build_arena(arena)
                after = snapshot(arena)
            before = after
        report["seconds"] = round(time.monotonic() - t0, 1)
        return report
    finally:
        if old_state is None:
            os.environ.pop("PHY802_STATE_DIR", None)
        else:
            os.environ["PHY802_STATE_DIR"] = old_state
        shutil.rmtree(work, ignore_errors=True)


def main_cli(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sample", type=int, default=None, help="run a random sample of this many attacks (default: all)")
    p.add_argument("--seed", type=int, default=1, help="seed of the sample (default 1)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="print each failure as it happens")
    a = p.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    r = sweep(a.sample, a.seed, a.verbose)
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"{r['attacks']} attacks (of {r['generated']} generated) in {r['seconds']} s: "
              f"{r['files_lost']} files lost, {r['tracebacks']} tracebacks, {r['exit_3']} exit 3, "
              f"{r['silent_accepts']} silent accepts")
        for f in r["failures"][:40]:
            print(f"  {f['attack']}: {', '.join(f['problems'])}  [{f['stderr'][-160:]}]")
    return 0 if not r["failures"] else 1


if __name__ == "__main__":
    sys.exit(main_cli())
