"""Replay the known-answer files in vectors/rs and check the reader's error messages."""

from pathlib import Path

import numpy as np
import pytest

from phy802.fec import KP4, KR4, RS272, encode
from phy802.fec.vectors import check_kat, format_kat, generate_kat, parse_kat, read_kat

from fec_helpers import galois_rs

VECTORS = Path(__file__).resolve().parents[3] / "vectors" / "rs"


@pytest.mark.parametrize("fname, code", [("kp4.txt", KP4), ("kr4.txt", KR4), ("rs272.txt", RS272)])
def test_known_answer_files_replay(fname, code):
    kat = read_kat(VECTORS / fname)
    assert kat.code == code and kat.code.name == code.name
    assert len(kat.encode) >= 5 and len(kat.decode) >= 6
    assert check_kat(kat) == []
    # The notes' message is the first encode vector, and galois agrees on every encode vector.
    if code.k == 514:
        assert np.array_equal(kat.encode[0].message, (19 + 73 * np.arange(514)) % 1024)
    rs = galois_rs(code.nparity)
    msgs = np.stack([v.message for v in kat.encode])
    assert np.array_equal(np.asarray(rs.encode(rs.field(msgs))), np.stack([v.codeword for v in kat.encode]))
    ncs = [v.n_corrected for v in kat.decode]
    assert ncs[:4] == [0, 1, code.t // 2, code.t] and ncs[4] == -1 and ncs[5] == code.t


def test_check_kat_reports_a_corrupted_vector():
    kat = parse_kat(format_kat(generate_kat(KR4, seed=1)), "mem")
    kat.encode[1].codeword[527] ^= 1
    kat.decode[2].decoded[0] ^= 1
    problems = check_kat(kat)
    assert len(problems) == 2
    assert "encode mismatch" in problems[0] and "index 527" in problems[0]


def _text(body: str) -> str:
    return "code: 528 514\n" + body


@pytest.mark.parametrize(
    "body, match",
    [
        ("message: 1 2 3\n", r"f:2: 'message' needs 514 symbols, got 3"),
        ("message: " + "1 " * 513 + "x\n", r"f:2: 'message' field 514: 'x' is not a decimal"),
        ("message: " + "1 " * 513 + "1024\n", r"field 514: symbol 1024 is outside"),
        ("message: " + "1 " * 514 + "\nreceived: 1\n", r"f:3: expected 'codeword:' after line 2"),
        ("message: " + "1 " * 514 + "\n", r"file ends before 'codeword:'"),
        ("codeword: 1\n", r"'codeword' without a preceding 'message'"),
        ("field: x^10 + x^4 + 1\n", r"field polynomial must be"),
        ("first_root: 1\n", r"only first_root 0"),
        ("bogus: 1\n", r"unknown key 'bogus'"),
        ("just words\n", r"expected 'key: value'"),
        ("n_corrected: 1\n", r"without preceding"),
    ],
)
def test_reader_errors_name_line_and_field(body, match):
    with pytest.raises(ValueError, match=match):
        parse_kat(_text(body), "f")


def test_reader_needs_code_first():
    with pytest.raises(ValueError, match="'code: N K' must come before"):
        parse_kat("message: 1\n", "f")
    with pytest.raises(ValueError, match="n - k even"):
        parse_kat("code: 528 513\n", "f")
    with pytest.raises(ValueError, match="no 'code: N K' line"):
        parse_kat("# nothing\n", "f")


def test_format_round_trip():
    kat = generate_kat(KP4, seed=3, n_random=1)
    again = parse_kat(format_kat(kat, "header line"), "mem")
    assert again.code == KP4 and again.comments[0] == "header line"
    assert all(np.array_equal(a.codeword, b.codeword) for a, b in zip(again.encode, kat.encode))
    assert np.array_equal(again.encode[-1].codeword, encode(KP4, kat.encode[-1].message))
