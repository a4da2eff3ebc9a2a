"""Property tests of the CLI's validating argument types (phy802.cli._common)."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given, settings, strategies as st

from phy802.cli._common import choice_list, count_arg, float_arg, int_arg, list_arg, probability, uint_arg

FAST = settings(max_examples=150, deadline=None)


def _rejects(parse, text: str) -> bool:
    try:
        parse(text)
    except argparse.ArgumentTypeError:
        return True
    return False


@FAST
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_arg_round_trips_every_finite_float(x):
    assert float_arg()(repr(x)) == x
    assert float_arg()(f"{x:.17e}") == x


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e400", "1_0", "+5", "",
                                  " ", "0x10", "1e", "e5", "--1", "\u0661", "\uff11", "1.0.0", "5 5", "1,5"])
def test_float_arg_rejects(text):
    assert _rejects(float_arg(), text)


@FAST
@given(st.text(max_size=12))
def test_float_arg_accepts_only_finite_ascii_numbers(text):
    try:
        v = float_arg()(text)
    except argparse.ArgumentTypeError:
        return
    assert math.isfinite(v)
    assert text.strip().isascii() and "_" not in text and not text.strip().startswith("+")


def test_probability_bounds():
    p = probability()
    assert p("0.5") == 0.5 and p("1e-300") == 1e-300
    for bad in ("0", "1", "-0.1", "1.5", "nan"):
        assert _rejects(p, bad)
    assert probability(zero_ok=True)("0") == 0.0 and _rejects(probability(zero_ok=True), "1")
    assert probability(zero_ok=True, one_ok=True)("1") == 1.0


@FAST
@given(st.integers(-10**30, 10**30))
def test_int_arg_round_trip_and_bounds(n):
    lo, hi = -1000, 10**6
    if lo <= n <= hi:
        assert int_arg(lo, hi)(str(n)) == n
    else:
        assert _rejects(int_arg(lo, hi), str(n))


@pytest.mark.parametrize("text", ["1.0", "1e3", "+5", "1_000", "\u0665", "0x10", "", "- 1", "nan"])
def test_int_arg_rejects(text):
    assert _rejects(int_arg(), text)


@FAST
@given(st.integers(0, 10**15))
def test_count_arg_accepts_integer_valued_floats(n):
    parse = count_arg(0, 10**15)
    assert parse(str(n)) == n
    if float(n) == n:  # exactly representable: the float spellings give the same count
        assert parse(repr(float(n))) == n
        assert parse(f"{n:.16e}") == n


@pytest.mark.parametrize("text,hi", [("1e30", 10**12), ("1.5", None), ("-1", None), ("inf", None), ("nan", None),
                                     ("1e12", 10**9), ("2.5e0", None)])
def test_count_arg_rejects(text, hi):
    assert _rejects(count_arg(0, hi), text)


def test_count_arg_scientific():
    assert count_arg(0, 10**12)("1e10") == 10**10 and count_arg()("2.5e3") == 2500


@FAST
@given(st.integers(0, (1 << 58) - 1))
def test_uint_arg_hex_and_decimal(n):
    parse = uint_arg((1 << 58) - 1)
    assert parse(str(n)) == n and parse(hex(n)) == n and parse(f"0X{n:X}") == n


@pytest.mark.parametrize("text", ["0x", "-0", "-1", "+1", "0x_1", "1_0", "0o7", "0b1", "0x1g", "\u0661"])
def test_uint_arg_rejects(text):
    assert _rejects(uint_arg(1 << 20), text)


@FAST
@given(st.lists(st.floats(1e-12, 0.4), min_size=1, max_size=8, unique=True))
def test_list_arg_round_trip(xs):
    assert list_arg(probability())(",".join(map(repr, xs))) == tuple(xs)


@pytest.mark.parametrize("text", ["", ",", "1e-5,", ",1e-5", "1e-5,,1e-4", "1e-5 1e-4", "1e-5,nan", "1e-5,1e-5"])
def test_list_arg_rejects(text):
    assert _rejects(list_arg(probability()), text)


def test_choice_list():
    parse = choice_list(("ieee", "bypass", "llr"))
    assert parse("ieee,bypass") == ("ieee", "bypass")
    assert _rejects(parse, "ieee,kp4") and _rejects(parse, "ieee,ieee")
