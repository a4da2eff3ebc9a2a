"""What link engineers paste and what phy802 writes for them: one meaning per histogram format name
across commands, hex dumps as hex tools print them, SONiC pastes with their prompt and CRLF line ends,
counters that contradict the bins, bounded reads of endless input."""

from __future__ import annotations

import json

import pytest

from phy802.cli import main
from phy802.telemetry.parsers import TelemetryError, parse_telemetry

LINK = ["link", "--code", "kp4", "--fec", "ieee", "--ber", "2e-4", "--pairs", "64", "--seed", "1", "--level",
        "codeword", "--bins", "0,1-3,4-15"]


# ------------------------------------------------------------------------------ one meaning per format name


@pytest.mark.parametrize("fmt", ["ethtool-json", "ynl"])
def test_link_writes_what_fec_tail_reads_under_the_same_name(fmt, tmp_path, capsys):
    assert main(LINK + ["--format", fmt]) == 0
    p = tmp_path / "h.json"
    p.write_text(capsys.readouterr().out)
    doc = json.loads(p.read_text())
    if fmt == "ethtool-json":  # ethtool --json: a list of devices, statistics.hist[] of bin_low/bin_high/total
        assert isinstance(doc, list) and set(doc[0]["statistics"]["hist"][0]) == {"bin_low", "bin_high", "total"}
    else:  # the kernel's YNL fec-get reply
        assert set(doc["stats"]["hist"][0]) == {"bin-low", "bin-high", "bin-val"}
    for forced in (fmt, "auto"):
        assert main(["fec", "tail", str(p), "--format", forced, "--models", "binomial", "--bootstrap", "0",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["input_format"] == fmt
    other = "ynl" if fmt == "ethtool-json" else "ethtool-json"
    assert main(["fec", "tail", str(p), "--format", other, "--models", "binomial", "--bootstrap", "0"]) == 2
    assert f"--format {fmt}" in capsys.readouterr().err  # the hint names the right one


def test_sweep_ethtool_json_is_one_device_per_point(capsys):
    assert main(["sweep", "--ber", "1e-3,2e-3", "--code", "kp4", "--fec", "ieee", "--max-codewords", "400",
                 "--max-seconds", "5", "--workers", "1", "--no-progress", "--format", "ethtool-json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["ifname"] for d in doc] == ["kp4/ieee:ber=0.001", "kp4/ieee:ber=0.002"]
    tel = parse_telemetry(json.dumps(doc), "sweep.json", fmt="ethtool-json", t=15)
    assert tel.names() == ["kp4/ieee:ber=0.001", "kp4/ieee:ber=0.002"]


@pytest.mark.parametrize("fmt", ["ethtool-json", "ynl"])
def test_800g_link_honours_the_histogram_formats(fmt, capsys):
    # the 800G/1.6T model printed its usual text for any --format (the option silently ignored)
    assert main(["link", "--rate", "800G", "--snr-db", "16", "--codewords", "60", "--seed", "1", "--format", fmt,
                 "--bins", "0,1,2,3-15"]) == 0
    tel = parse_telemetry(capsys.readouterr().out, "800g.json", fmt=fmt, t=15)
    assert [(b.low, b.high) for b in tel.ports[0].hist.bins] == [(0, 0), (1, 1), (2, 2), (3, 15)]
    assert tel.ports[0].hist.total >= 60


# ------------------------------------------------------------------------------ counters against the bins


def _eth(corrected: int, bins=(10**9, 2 * 10**8, 4 * 10**7)) -> str:
    hist = [{"bin_low": i, "bin_high": i, "total": c} for i, c in enumerate(bins)]
    return json.dumps([{"ifname": "eth0", "statistics": {"corrected_blocks": {"total": corrected}, "hist": hist}}])


def test_corrected_blocks_must_agree_with_the_bins():
    with pytest.raises(TelemetryError, match=r"corrected-blocks counter 5 holds only the 240000000 codewords"):
        parse_telemetry(_eth(5), "e.json", t=15)
    # a counter that holds the bins (bins 3..15 not reported) is fine, and one read a moment apart
    parse_telemetry(_eth(240_000_000 + 12345), "e.json", t=15)
    parse_telemetry(_eth(240_000_000 - 1000), "e.json", t=15)
    # bins covering every count 1..t must sum to the counter
    full = [10**6, 500, 20] + [0] * 13
    with pytest.raises(TelemetryError, match="far more than"):
        parse_telemetry(_eth(10**8, full), "e.json", t=15)
    parse_telemetry(_eth(520, full), "e.json", t=15)


# ------------------------------------------------------------------------------ hex codeword pastes


def _codewords():
    import numpy as np

    from phy802.fec.rs import CODES, encode

    cw = encode(CODES["kp4"], np.random.default_rng(1).integers(0, 1024, (2, 514)))
    cw[1, 5] ^= 0x155  # one symbol error in the second word
    return cw


def _xxd(data: bytes) -> str:
    """``xxd``'s default dump (16 bytes a line in 2-byte groups, then the ASCII column)."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hx = " ".join(chunk[i:i + 2].hex() for i in range(0, len(chunk), 2))
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}: {hx:<39}  {asc}")
    return "\n".join(lines) + "\n"


def _xxd_i(data: bytes, array: str = "cap_bin") -> str:
    """``xxd -i``'s C array (12 bytes a line, then the ``_len`` line)."""
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 12]) for i in range(0, len(data), 12)]
    return (f"unsigned char {array}[] = {{\n" + ",\n".join("  " + r for r in rows) + "\n};\n"
            f"unsigned int {array}_len = {len(data)};\n")


def _packed(cw) -> bytes:
    import numpy as np

    bits = ((cw[..., None] >> np.arange(9, -1, -1)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits).tobytes()


@pytest.mark.parametrize("shape", ["0x-commas", "xxd", "xxd-p", "xxd-i"])
def test_hex_reader_takes_what_dumps_print(shape, tmp_path, capsys):
    cw = _codewords()
    if shape == "0x-commas":
        text = "".join(", ".join(f"0x{v:03X}" for v in w) + ",\n" for w in cw)
    elif shape == "xxd":
        text = _xxd(_packed(cw))
    elif shape == "xxd-i":
        text = _xxd_i(_packed(cw))
    else:
        h = _packed(cw).hex()
        text = "".join(h[i:i + 60] + "\n" for i in range(0, len(h), 60))
    p = tmp_path / "cap.txt"
    p.write_text(text)
    assert main(["fec", "decode", "--format", "hex", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [w["n_corrected"] for w in doc["words"]] == [0, 1] and doc["words"][1]["positions"] == [5]


def test_xxd_paste_with_a_line_missing_or_a_partial_word(tmp_path, capsys):
    lines = _xxd(_packed(_codewords())).splitlines(keepends=True)
    p = tmp_path / "cut.txt"
    p.write_text("".join(lines[:3] + lines[4:]))
    assert main(["fec", "decode", "--format", "hex", str(p)]) == 2
    assert "cut.txt:4: xxd offset 00000040 but 48 bytes came before it" in capsys.readouterr().err
    p.write_text("".join(lines[:-1]))
    assert main(["fec", "decode", "--format", "hex", str(p)]) == 2
    assert "not a whole number of 544-symbol words" in capsys.readouterr().err


def test_xxd_i_paste_cut_or_without_its_header(tmp_path, capsys):
    lines = _xxd_i(_packed(_codewords())).splitlines(keepends=True)
    p = tmp_path / "c.txt"
    p.write_text("".join(lines[:3] + lines[4:]))  # a line of bytes lost: the _len line says so
    assert main(["fec", "decode", "--format", "hex", str(p)]) == 2
    assert "cap_bin_len is 1360 but the array holds 1348 bytes" in capsys.readouterr().err
    p.write_text("".join(lines[:-3]))  # cut before '};'
    assert main(["fec", "decode", "--format", "hex", str(p)]) == 2
    assert "the xxd -i array 'cap_bin' is not closed" in capsys.readouterr().err
    p.write_text("".join(lines[1:-2]))  # 'xxd -i < FILE': the bytes alone read as 12 symbols a line
    assert main(["fec", "decode", "--format", "hex", str(p)]) == 2
    assert "expected 544 symbols, got 12 (bytes as 'xxd -i < FILE' prints them?" in capsys.readouterr().err
    p.write_text("".join(lines))  # read as decimal: the hint
    assert main(["fec", "decode", str(p)]) == 2
    assert "give --format hex" in capsys.readouterr().err


def test_decimal_reading_of_hex_suggests_format_hex(tmp_path, capsys):
    p = tmp_path / "h.txt"
    p.write_text(" ".join(f"{v:03x}" for v in _codewords()[0]) + "\n")
    assert main(["fec", "decode", str(p)]) == 2
    assert "is not a decimal number (the input looks like hex symbols or an xxd dump: give --format hex)" \
        in capsys.readouterr().err
    p.write_text(_xxd(_packed(_codewords())))
    assert main(["fec", "decode", str(p)]) == 2
    assert "give --format hex" in capsys.readouterr().err


# ------------------------------------------------------------------------------ SONiC pastes

SONIC_PASTE = ("admin@sonic:~$ show interfaces counters fec-histogram Ethernet8\n"
               "Symbol Errors Per Codeword  Codewords\n--------------------------  --------------\n"
               "BIN0                        77092897948028\nBIN1                        5529181\n"
               "BIN2                        85996\nBIN3                        217\nBIN4                        0\n"
               "admin@sonic:~$\n")


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_sonic_paste_with_prompt_and_crlf(eol):
    tel = parse_telemetry(SONIC_PASTE.replace("\n", eol), "paste.txt", t=15)
    assert tel.fmt == "sonic-hist" and tel.names() == ["Ethernet8"]
    assert [b.count for b in tel.ports[0].hist.bins][:4] == [77092897948028, 5529181, 85996, 217]


def test_sonic_block_before_a_portstat_table_is_refused():
    table = ("IFACE      STATE  BIN0  BIN1  BIN2  BIN3\n"
             "Ethernet0  U      100   10    1     0\n")
    with pytest.raises(TelemetryError, match=r"mix\.txt:1: a SONiC fec-histogram row before the portstat table"):
        parse_telemetry(SONIC_PASTE.split("\n", 1)[1] + table, "mix.txt", t=15)


def test_portstat_table_then_a_sonic_block_is_named_for_what_it_is():
    # the other order of the two commands' output: was refused as "1 columns, the header has 6"
    table = ("IFACE      STATE  BIN0  BIN1  BIN2  BIN3\n"
             "Ethernet0  U      100   10    1     0\n")
    with pytest.raises(TelemetryError, match=r"mix\.txt:3: a SONiC fec-histogram block after the portstat table"):
        parse_telemetry((table + SONIC_PASTE.split("\n", 1)[1]).replace("\n", "\r\n"), "mix.txt", t=15)
    with pytest.raises(TelemetryError, match=r"bad\.txt:2: 7 columns, the header has 6"):
        parse_telemetry(table.replace("U      100", "U 7 100"), "bad.txt", t=15)  # a plain bad row says so
