"""The Clause 119 geometry is defined once (phy802.clause119) and every user imports it.

Before, 544/514/257/10880 were defined in pcs/distribution.py, link/config.py, theory_inner.py,
protocol/framing.py and protocol/trace/_gen_kernels.py, and the rate -> PCS lanes mapping was
written out in pcs/distribution.py, pcs/alignment.py, pcs/config.py, link/config.py,
link/geometry.py and protocol/framing.py."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GEOMETRY_VALUES = {544, 514, 257, 10880, 10280, 5440, 163840, 81920}
# the codec's own code objects (phy802.fec) are the RS library's definitions, not the line's geometry
EXEMPT = {"phy802/clause119.py", "phy802/fec/rs.py", "phy802/telemetry/fit.py"}


def _sources():
    for pkg in ("phy802", "protocol"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel not in EXEMPT and not rel.startswith("phy802/cli/"):
                yield rel, ast.parse(p.read_text())


def _int_constants(node) -> list[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.Tuple):
        return [v for e in node.elts for v in _int_constants(e)]
    return []


def test_geometry_numbers_are_not_defined_outside_clause119():
    found = []
    for rel, tree in _sources():
        for node in tree.body:  # module-level names
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            hits = [v for v in _int_constants(value) if v in GEOMETRY_VALUES] if value is not None else []
            if hits:
                found.append(f"{rel}:{node.lineno} = {hits}")
    assert found == []


def test_rate_to_lanes_is_written_out_only_in_clause119():
    found = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                if any(isinstance(k, ast.Constant) and k.value in ("400G", "200G") and _int_constants(v)
                       for k, v in zip(node.keys, node.values)):
                    found.append(f"{rel}:{node.lineno} dict")
            elif isinstance(node, ast.IfExp):
                test_strs = {n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant)}
                if test_strs & {"400G", "200G"} and _int_constants(node.body) and _int_constants(node.orelse):
                    found.append(f"{rel}:{node.lineno} if/else")
            elif isinstance(node, ast.Call):
                args = node.args
                for a, b in zip(args, args[1:]):
                    if isinstance(a, ast.Constant) and a.value in ("400G", "200G") and _int_constants(b):
                        found.append(f"{rel}:{node.lineno} call")
    assert found == []


def test_clause119_values_and_the_old_names():
    from phy802 import clause119 as g
    from phy802 import theory, theory_inner
    from phy802.link import K_MSG, LinkConfig
    from phy802.pcs import PcsConfig, distribution
    from protocol import framing
    from protocol.trace import _gen_kernels

    assert (g.KP4_N, g.KP4_K, g.KP4_T, g.BLOCK_BITS, g.BLOCKS_PER_PAIR) == (544, 514, 15, 257, 40)
    assert g.PAIR_MESSAGE_BITS == 2 * g.KP4_K * g.SYMBOL_BITS == 10280  # 40 257b blocks fill A and B exactly
    assert g.PAIR_LINE_BITS == 10880 and g.CODEWORD_LINE_BITS == 5440
    assert [g.pcs_lanes(r) for r in g.RATES] == [16, 8] and dict(g.PHYSICAL_LANES) == {"400G": 8, "200G": 4}
    assert {r: s // g.BLOCKS_PER_PAIR for r, s in g.AM_SPACING_BLOCKS.items()} == {"400G": 4096, "200G": 2048}
    for c in g.CODE_SIZES.values():  # a pair's data symbols carry its 257b blocks exactly
        assert 2 * c.data_symbols * g.SYMBOL_BITS == c.blocks_per_pair * g.BLOCK_BITS
    assert [c.t for c in g.CODE_SIZES.values()] == [15, 7, 7]
    # the names users had keep their values
    assert distribution.N == framing.RS_N == theory_inner.N_KP4 == theory.KP4.n == 544
    assert K_MSG == framing.RS_K == theory.KP4.k == 514 and theory_inner.T_KP4 == 15
    assert _gen_kernels.PAIR_BITS == framing.PAIR_LINE_BITS == 10880 and _gen_kernels.BLOCK_BITS == 257
    assert {r: (q.n_lanes, q.am_blocks, q.am_period_pairs) for r, q in framing.RATES.items()} == {
        "400G": (16, 8, 4096), "200G": (8, 4, 2048)}
    assert {k: (c.n, c.data_symbols, c.blocks_per_pair, c.pad_symbols) for k, c in framing.CODES.items()} == {
        "kp4": (544, 514, 40, 0), "kr4": (528, 514, 40, 0), "rs272": (272, 257, 20, 1), "none": (544, 514, 40, 0)}
    assert LinkConfig(rate="200G").n_lanes == 4 and LinkConfig().n_pcs_lanes == 16
    assert PcsConfig(rate="200G").spacing == 81920 and PcsConfig().n_lanes == 16
    try:
        distribution.n_lanes_of("800G")
    except ValueError as exc:
        assert "'800G'" in str(exc)
    else:
        raise AssertionError("800G has no Clause 119 PCS lanes")
