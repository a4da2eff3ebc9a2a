from pathlib import Path

import galois
import numpy as np
import pytest

from phy802.cli import main
from phy802.pma import BitMux, gray_map, lane_bit_to_pcsl
from phy802.pma.prbs import PATTERNS, prbs_bits, prbsq
from phy802.pma.vectors import VectorError, verify_dir, verify_file

VECTORS = Path(__file__).resolve().parents[3] / "vectors" / "pma"

# IEEE 802.3 120.5.11.2 a: PRBS9Q with seed 111111111, the 511 symbols printed in the standard,
# as quoted in github.com/Omer-Sella/802.3 ieeeConstants.py
# (stringValuePRBS9Q_seed111111111_clause_120_5_11_2_a). External oracle.
IEEE_PRBS9Q = (
    "0012322303231310010331213302202231320111030230213332303130303000100302003120333200212331323101100332"
    "1022213103113222031333131300020131101331122210113023320320220122121001332132320011332233333001103322"
    "0323230012023310221121101030131200322132021002322002222300221220112020300311023210123122021303331012"
    "0132111201020101000030101301023111130132210212030330111331223203103212231021102020001302033021032223"
    "3032012113113123022323300211321213003211221111000331112311212000231210312332333031002023011232131330"
    "12123012222"
)


def test_prbs9q_equals_ieee_sequence():
    assert len(IEEE_PRBS9Q) == 511
    got = "".join(map(str, prbsq("prbs9q", 511).tolist()))
    assert got == IEEE_PRBS9Q


def test_prbs9q_period_511_symbols():
    s = prbsq("prbs9q", 3 * 511)
    assert np.array_equal(s[:511], s[511:1022]) and np.array_equal(s[:511], s[1022:])


@pytest.mark.parametrize("name", list(PATTERNS))
def test_polynomials_are_primitive(name):
    pat = PATTERNS[name]
    poly = galois.Poly.Str(pat.polynomial)
    assert poly.is_primitive()


@pytest.mark.parametrize("name", list(PATTERNS))
def test_lfsr_satisfies_recurrence(name):
    pat = PATTERNS[name]
    b = prbs_bits(name, 4000).astype(int) ^ int(pat.invert)  # undo the output inverter (Figure 49-9)
    seed = np.array([int(c) for c in pat.seed])[::-1]  # time order: S(N-1) oldest ... S0 newest
    hist = np.concatenate([seed, b])  # the seed's bits precede the output
    n = np.arange(pat.degree, hist.size)
    acc = np.zeros(n.size, int)
    for k in pat.exponents:
        acc ^= hist[n - k]
    assert np.array_equal(acc, hist[pat.degree:])


def test_prbs13_bit_period():
    b = prbs_bits("prbs13q", 2 * 8191)
    assert np.array_equal(b[:8191], b[8191:])
    assert not any(np.array_equal(b[:13], b[k:k + 13]) for k in range(1, 8191))


def test_prbs_bad_seed_and_pattern():
    with pytest.raises(ValueError, match="all zeros"):
        prbsq("prbs9q", 5, "0" * 9)
    with pytest.raises(ValueError, match="9 characters"):
        prbsq("prbs9q", 5, "111")
    with pytest.raises(ValueError, match="unknown pattern"):
        prbsq("prbs7q", 5)


@pytest.mark.parametrize("n_pcsl,n_lanes", [(16, 8), (16, 4), (8, 4)])
def test_bitmux_round_trip_and_layout(n_pcsl, n_lanes):
    rng = np.random.default_rng(n_lanes)
    m = BitMux(n_pcsl, n_lanes)
    bits = rng.integers(0, 2, (n_pcsl, 64), dtype=np.uint8)
    lanes = m.mux(bits)
    assert lanes.shape == (n_lanes, 64 * m.ratio)
    assert np.array_equal(m.demux(lanes), bits)
    lane, q = np.meshgrid(np.arange(n_lanes), np.arange(lanes.shape[1]), indexing="ij")
    pl, pb = lane_bit_to_pcsl(m, lane, q)
    assert np.array_equal(bits[pl, pb], lanes)


def test_bitmux_custom_order_and_pam4_symbol_bits_from_two_lanes():
    order = tuple((i, i + 8) for i in range(8))
    m = BitMux(16, 8, order)
    bits = np.zeros((16, 4), np.uint8)
    bits[3] = 1  # PCS lane 3 all ones, lane 11 zeros: lane 3 symbols are {A=1,B=0} -> 3
    sym = gray_map(m.mux(bits))
    assert sym[3].tolist() == [3, 3, 3, 3]
    assert np.array_equal(m.demux(m.mux(bits)), bits)


def test_bitmux_rejects_bad_order():
    with pytest.raises(ValueError, match="exactly once"):
        BitMux(16, 8, tuple((0, 1) for _ in range(8)))
    with pytest.raises(ValueError, match="multiple"):
        BitMux(16, 5)


def test_vector_files_verify():
    results = verify_dir(VECTORS)
    names = {Path(r.path).name for r in results}
    assert {"gray_map.txt", "precoder.txt", "prbs9q.txt", "prbs13q.txt", "prbs31q.txt"} <= names
    for r in results:
        assert r.ok, (r.path, r.failures)


def test_vector_checker_detects_a_wrong_value(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("# header\nkind=gray bits=01 symbol=1\nkind=gray bits=11 symbol=3\n")
    res = verify_file(f)
    assert res.n_records == 2 and len(res.failures) == 1 and f"{f}:3:" in res.failures[0]
    txt = (VECTORS / "prbs9q.txt").read_text().replace("symbols=0012", "symbols=0013")
    (tmp_path / "p.txt").write_text(txt)
    assert "symbol 3" in verify_file(tmp_path / "p.txt").failures[0]


@pytest.mark.parametrize(
    "text,msg",
    [
        ("kind=gray bits=01\n", "lacks field"),
        ("kind=nope\n", "kind='nope'"),
        ("garbage\n", "key=value"),
        ("kind=precode initial=x input=0 output=0\n", "initial='x'"),
        ("kind=prbsq pattern=prbs9q seed=1 count=1 symbols=0\n", "field seed"),
    ],
)
def test_vector_parse_errors_name_file_and_line(tmp_path, text, msg):
    f = tmp_path / "v.txt"
    f.write_text("# c\n\n" + text)
    with pytest.raises(VectorError, match=msg) as ei:
        verify_file(f)
    assert f"{f}:3:" in str(ei.value)


def test_cli_prbs(capsys):
    assert main(["pma", "prbs", "--pattern", "prbs9q", "--count", "511"]) == 0
    assert capsys.readouterr().out.strip() == IEEE_PRBS9Q
    assert main(["pma", "precode", "0123", "--initial", "0"]) == 0
    assert capsys.readouterr().out.strip() == "0112"
    assert main(["pma", "prbs", "--pattern", "prbs7q"]) == 2
