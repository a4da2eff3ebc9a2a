"""Known-answer vector files of the PCS (``vectors/pcs/*.txt``): format, parser, checker, writer.

Format (plain text, UTF-8, same conventions as :mod:`phy802.pma.vectors`): lines starting with
``#`` are comments (each file's header states inputs, conventions and origin); blank lines are
ignored; every other line is one record of whitespace-separated ``key=value`` fields.  Bit strings
are ``0``/``1`` characters in sending order (first bit first); symbol lists are comma-separated
decimal 10-bit values; integers may be decimal or ``0x`` hex.  Kinds:

* ``kind=transcode257 blocks=SH:HEX,SH:HEX,SH:HEX,SH:HEX x=BITS`` — four 66b blocks (``SH`` = sync
  header in sending order, ``01`` data / ``10`` control; ``HEX`` = 16 hex digits, the payload as a
  64-bit integer whose bit i is block bit c<i+2>) and the 257-bit result, x<0> first.
* ``kind=scramble seed=S input=BITS output=BITS`` — 1 + x^39 + x^58 from 58-bit state ``S``
  (bit i = S<i> = the bit sent i+1 bits before the first input bit).
* ``kind=am_symbols rate=R lane=L symbols=...`` — the twelve 10-bit symbols of lane L's marker.
* ``kind=am_group rate=R prbs9_seed=P status=F group=G bits=BITS`` — AM group G (0-based) of a
  stream (the pad PRBS9 runs on from group to group).
* ``kind=codeword_pair rate=R input=IN scrambler_seed=S prbs9_seed=P status=F codewordA=...
  codewordB=...`` and ``kind=pair_lane ... lane=L symbols=...`` — the first (AM-bearing) codeword
  pair of a stream and what each PCS lane sends for it.  ``IN`` is ``idle`` (constant idle 66b
  blocks) or ``counter`` (all data blocks, payload of block i = (i + 1) * 0x9E3779B97F4A7C15 mod
  2^64).
* ``kind=codec66 frame=HEX idle_blocks=N blocks=SH:HEX,...`` — a MAC frame (destination address to
  payload, without FCS: the encoder appends the CRC-32 FCS) through Clause 82 64b/66b encoding:
  start block (preamble/SFD), data blocks, terminate block, ``N`` idle blocks, idles up to a
  multiple of 4 blocks.
* ``kind=frames_tx rate=R frames=HEX;HEX;... scrambler_seed=S prbs9_seed=P status=F lane=L
  symbols=...`` — the whole transmit path from MAC frames (FCS appended, one idle block after each
  frame, idles filling the first codeword pair) to what PCS lane L sends for that first pair.

:func:`verify_file` checks every record against this package and returns the failures; parse
errors raise :class:`VectorError` naming the file and line.  :func:`write_vectors` regenerates
the files (atomically).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from phy802._kvrecords import VectorError, VectorRecord, VerifyResult, read_records, verify_records
from phy802._kvrecords import verify_dir as _verify_dir
from phy802.runtime.output import atomic_write_text
from phy802.pcs.alignment import am_group_bits, am_symbols
from phy802.pcs.codec66 import Blocks66, SYNC_DATA, frames_to_blocks, idle_blocks
from phy802.pcs.config import PcsConfig
from phy802.pcs.scrambler import scramble
from phy802.pcs.transcode257 import bits_of, encode_257, words_of
from phy802.pcs.transmit import PcsTransmitter

__all__ = ["VectorError", "VectorRecord", "VerifyResult", "read_vectors", "check_record",
           "verify_file", "verify_dir", "write_vectors", "counter_blocks"]

_COMMON_PAIR = ("rate", "input", "scrambler_seed", "prbs9_seed", "status")
_REQUIRED = {
    "transcode257": ("blocks", "x"),
    "scramble": ("seed", "input", "output"),
    "am_symbols": ("rate", "lane", "symbols"),
    "am_group": ("rate", "prbs9_seed", "status", "group", "bits"),
    "codeword_pair": _COMMON_PAIR + ("codewordA", "codewordB"),
    "pair_lane": _COMMON_PAIR + ("lane", "symbols"),
    "codec66": ("frame", "idle_blocks", "blocks"),
    "frames_tx": ("rate", "frames", "scrambler_seed", "prbs9_seed", "status", "lane", "symbols"),
}
_GOLDEN = 0x9E3779B97F4A7C15





def read_vectors(path: str | Path) -> list[VectorRecord]:
    """Parse a vector file into records; raises :class:`VectorError` (``file:line: ...``) or ``OSError``."""
    return read_records(path, _REQUIRED)


# --- field parsers (errors name file, line and field) -------------------------------------------

def _bits(rec: VectorRecord, key: str, n: int | None = None) -> np.ndarray:
    s = rec.fields[key]
    if not s or s.strip("01"):
        raise VectorError(f"{rec.where()}: field {key}={s[:20]!r}: expected a 0/1 bit string")
    if n is not None and len(s) != n:
        raise VectorError(f"{rec.where()}: field {key}: expected {n} bits, got {len(s)}")
    return np.frombuffer(s.encode(), np.uint8) - ord("0")


def _int(rec: VectorRecord, key: str, lo: int = 0, hi: int | None = None) -> int:
    s = rec.fields[key]
    try:
        v = int(s, 0)
    except ValueError:
        raise VectorError(f"{rec.where()}: field {key}={s!r}: expected an integer") from None
    if v < lo or (hi is not None and v > hi):
        raise VectorError(f"{rec.where()}: field {key}={s}: out of range {lo}..{hi}")
    return v


def _symbols(rec: VectorRecord, key: str, n: int) -> np.ndarray:
    s = rec.fields[key]
    try:
        v = np.array([int(x) for x in s.split(",")], np.int64)
    except ValueError:
        raise VectorError(f"{rec.where()}: field {key}: expected comma-separated integers") from None
    if v.size != n:
        raise VectorError(f"{rec.where()}: field {key}: expected {n} symbols, got {v.size}")
    if v.min() < 0 or v.max() > 1023:
        raise VectorError(f"{rec.where()}: field {key}: symbols must be 0..1023")
    return v.astype(np.uint16)


def _rate(rec: VectorRecord) -> str:
    r = rec.fields["rate"]
    if r not in ("400G", "200G"):
        raise VectorError(f"{rec.where()}: field rate={r!r}: expected 400G or 200G")
    return r


def _blocks(rec: VectorRecord, count: int | None = 4) -> Blocks66:
    parts = rec.fields["blocks"].split(",")
    if count is not None and len(parts) != count:
        raise VectorError(f"{rec.where()}: field blocks: expected {count} blocks, got {len(parts)}")
    sync, pay = [], []
    for j, p in enumerate(parts):
        sh, _, hx = p.partition(":")
        if sh not in ("01", "10") or len(hx) != 16:
            raise VectorError(f"{rec.where()}: field blocks, block {j}: expected 01:HEX16 or 10:HEX16, got {p!r}")
        try:
            pay.append(int(hx, 16))
        except ValueError:
            raise VectorError(f"{rec.where()}: field blocks, block {j}: bad hex {hx!r}") from None
        sync.append(int(sh[0]) | int(sh[1]) << 1)
    return Blocks66(np.array(sync, np.uint8), np.array(pay, np.uint64))


def counter_blocks(n: int) -> Blocks66:
    """The ``counter`` input: n data blocks, payload of block i = (i + 1) * 0x9E3779B97F4A7C15 mod 2^64."""
    i = np.arange(1, n + 1, dtype=np.uint64)
    return Blocks66(np.full(n, SYNC_DATA, np.uint8), i * np.uint64(_GOLDEN))


@lru_cache(maxsize=16)
def _pair(rate: str, inp: str, sseed: int, pseed: int, status: int):
    cfg = PcsConfig(rate=rate, scrambler_seed=sseed, prbs9_seed=pseed, am_status=status)
    n66 = 4 * (40 - cfg.am_blocks)
    blocks = idle_blocks(n66) if inp == "idle" else counter_blocks(n66)
    res = PcsTransmitter(cfg).transmit(blocks)
    assert res.n_pairs == 1
    return res


def _pair_of(rec: VectorRecord):
    inp = rec.fields["input"]
    if inp not in ("idle", "counter"):
        raise VectorError(f"{rec.where()}: field input={inp!r}: expected idle or counter")
    return _pair(_rate(rec), inp, _int(rec, "scrambler_seed", 0, (1 << 58) - 1),
                 _int(rec, "prbs9_seed", 1, 511), _int(rec, "status", 0, 7))


def _hex_bytes(rec: VectorRecord, key: str, text: str | None = None) -> bytes:
    text = rec.fields[key] if text is None else text
    try:
        if len(text) % 2:
            raise ValueError
        return bytes.fromhex(text)
    except ValueError:
        raise VectorError(f"{rec.where()}: field {key}={text[:24]!r}: expected an even number of hex digits") from None


@lru_cache(maxsize=16)
def _frames_pair(rate: str, frames: tuple[bytes, ...], sseed: int, pseed: int, status: int):
    cfg = PcsConfig(rate=rate, scrambler_seed=sseed, prbs9_seed=pseed, am_status=status)
    blocks = frames_to_blocks(list(frames), idle_blocks=1)
    if blocks.sync.size > 4 * (40 - cfg.am_blocks):
        raise ValueError(f"frames need {blocks.sync.size} 66b blocks; the first {rate} pair holds "
                         f"{4 * (40 - cfg.am_blocks)}")
    return PcsTransmitter(cfg).transmit(blocks)


def _blocks_text(b: Blocks66) -> str:
    return ",".join(("01" if s == SYNC_DATA else "10") + ":" + f"{int(p):016X}" for s, p in zip(b.sync, b.payload))


def _diff(rec: VectorRecord, what: str, exp: np.ndarray, got: np.ndarray) -> str | None:
    if np.array_equal(exp, got):
        return None
    j = int(np.argmax(exp != got))
    return f"{rec.where()}: {what} differs first at index {j}: the file has {int(exp[j])}, phy802 computes {int(got[j])}"


def check_record(rec: VectorRecord) -> str | None:
    """``None`` if the record matches this implementation, else a ``file:line: ...`` message."""
    k = rec.kind
    if k == "transcode257":
        blocks = _blocks(rec)
        x = _bits(rec, "x", 257)
        return _diff(rec, "257b block bit", x, bits_of(encode_257(blocks), 257))
    if k == "scramble":
        seed = _int(rec, "seed", 0, (1 << 58) - 1)
        d = _bits(rec, "input")
        s = _bits(rec, "output", d.size)
        return _diff(rec, "scrambled bit", s, bits_of(scramble(words_of(d), d.size, seed), d.size))
    if k == "am_symbols":
        rate = _rate(rec)
        cfg = PcsConfig(rate=rate)
        lane = _int(rec, "lane", 0, cfg.n_lanes - 1)
        return _diff(rec, f"lane {lane} marker symbol", _symbols(rec, "symbols", 12), am_symbols(cfg.markers)[lane])
    if k == "am_group":
        cfg = PcsConfig(rate=_rate(rec))
        g = _int(rec, "group", 0, 10000)
        bits = _bits(rec, "bits", cfg.am_bits)
        got = am_group_bits(cfg.markers, g + 1, _int(rec, "prbs9_seed", 1, 511), _int(rec, "status", 0, 7))[g]
        return _diff(rec, f"AM group {g} bit", bits, got)
    if k == "codeword_pair":
        res = _pair_of(rec)
        return (_diff(rec, "codeword A symbol", _symbols(rec, "codewordA", 544), res.codewords[0, 0])
                or _diff(rec, "codeword B symbol", _symbols(rec, "codewordB", 544), res.codewords[0, 1]))
    if k == "pair_lane":
        res = _pair_of(rec)
        L, K = res.lanes.shape
        lane = _int(rec, "lane", 0, L - 1)
        return _diff(rec, f"PCS lane {lane} symbol", _symbols(rec, "symbols", K), res.lanes[lane])
    if k == "codec66":
        frame = _hex_bytes(rec, "frame")
        exp = _blocks(rec, None)
        got = frames_to_blocks([frame], idle_blocks=_int(rec, "idle_blocks", 0, 1000))
        if got.sync.size != exp.sync.size:
            return f"{rec.where()}: the file has {exp.sync.size} 66b blocks, phy802's encoder made {got.sync.size}"
        return (_diff(rec, "66b block sync header", exp.sync, got.sync)
                or _diff(rec, "66b block payload", exp.payload, got.payload))
    if k == "frames_tx":
        frames = tuple(_hex_bytes(rec, "frames", f) for f in rec.fields["frames"].split(";"))
        try:
            res = _frames_pair(_rate(rec), frames, _int(rec, "scrambler_seed", 0, (1 << 58) - 1),
                               _int(rec, "prbs9_seed", 1, 511), _int(rec, "status", 0, 7))
        except ValueError as exc:
            raise VectorError(f"{rec.where()}: field frames: {exc}") from None
        L, K = res.lanes.shape
        lane = _int(rec, "lane", 0, L - 1)
        return _diff(rec, f"PCS lane {lane} symbol", _symbols(rec, "symbols", K), res.lanes[lane])
    raise VectorError(f"{rec.where()}: unknown kind {k!r}")  # pragma: no cover


def verify_file(path: str | Path) -> VerifyResult:
    """Check every record of one file; parse errors raise :class:`VectorError`."""
    return verify_records(path, read_vectors(path), check_record)


def verify_dir(directory: str | Path) -> list[VerifyResult]:
    """:func:`verify_file` for every ``*.txt`` in ``directory`` (sorted by name)."""
    return _verify_dir(directory, verify_file)


# --- writer -------------------------------------------------------------------------------------

def _b(bits) -> str:
    return "".join("1" if int(b) else "0" for b in bits)


def _s(sym) -> str:
    return ",".join(str(int(v)) for v in sym)


_ORIGIN = ("# Origin: generated by phy802.pcs (vectors/pcs/_gen/gen_pcs_vectors.py); these are regression\n"
           "# vectors of this implementation, not IEEE tables.  Cross-checks: {check}\n")


def write_vectors(directory: str | Path, seed: int = 802) -> list[Path]:
    """Regenerate every PCS vector file into ``directory`` (atomic writes); returns the paths."""
    d = Path(directory)
    rng = np.random.default_rng(seed)  # drawn from by the files in this order: the order is part of the vectors
    out = [_transcode257_file(d, rng), _scrambler_file(d, rng)]
    out += [_am_file(d, rate) for rate in ("400G", "200G")]
    out += [_pair_file(d, *case) for case in (("400G", "idle", 0x24E6959D0FA5DBD, 0x1FF),
                                               ("400G", "counter", 0x24E6959D0FA5DBD, 0x1FF),
                                               ("200G", "counter", 0x24E6959D0FA5DBD, 0x1FF))]
    out += [_codec66_file(d, rng), _frames_tx_file(d, rng)]
    return out


def _transcode257_file(d: Path, rng: np.random.Generator) -> Path:
    """``transcode257.txt``: four 66b blocks -> one 257b block, every control type at least once."""
    from phy802.pcs.codec66 import BLOCK_TYPES, SYNC_CTRL

    # 257b: every control type once as the first control block, plus all-data and mixed groups
    kinds = [None, *BLOCK_TYPES]
    groups = [[None] * 4] + [[t, None, None, None] for t in BLOCK_TYPES]
    groups += [[None, t, None, 0x1E] for t in BLOCK_TYPES] + [[0x78, 0xFF, None, 0x4B], [0x1E] * 4]
    groups += [[kinds[i] for i in rng.integers(0, len(kinds), 4)] for _ in range(8)]
    lines = []
    for g in groups:
        pay = rng.integers(0, 2**63, 4, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 4, dtype=np.uint64)
        sync = np.array([SYNC_DATA if t is None else SYNC_CTRL for t in g], np.uint8)
        for j, t in enumerate(g):
            if t is not None:
                pay[j] = (pay[j] & ~np.uint64(0xFF)) | np.uint64(t)
        b = Blocks66(sync, pay)
        x = bits_of(encode_257(b), 257)
        blk = ",".join(("01" if s == SYNC_DATA else "10") + ":" + f"{int(p):016X}" for s, p in zip(sync, pay))
        lines.append(f"kind=transcode257 blocks={blk} x={_b(x)}")
    hdr = ("# 256b/257b transcoding, IEEE 802.3 91.5.2.5 as used by 119.2.4.2.\n"
           "# Input: four 66b blocks c_0..c_3 (oldest first) as SH:HEX, SH = sync header in sending order\n"
           "# (01 = data, 10 = control), HEX = payload as a 64-bit integer, bit i = block bit c<i+2>\n"
           "# (octet k = bits 8k..8k+7; octet 0 of a control block is its type).  Output x: 257 bits, x<0> first.\n"
           + _ORIGIN.format(check="every record is also checked in tests against an independent\n"
                            "# bit-level transcoder written from 91.5.2.5 (tests/unit/pcs/test_transcode257.py).\n"))
    return _write(d / "transcode257.txt", hdr, lines)


def _scrambler_file(d: Path, rng: np.random.Generator) -> Path:
    """``scrambler.txt``: the 1 + x^39 + x^58 scrambler from four seeds (an impulse response included)."""
    lines = []
    for seed_v, n in ((0, 200), (0x24E6959D0FA5DBD, 514), ((1 << 58) - 1, 300), (int(rng.integers(0, 1 << 58)), 1028)):
        x = rng.integers(0, 2, n).astype(np.uint8)
        if seed_v == 0:
            x[:] = 0
            x[0] = 1  # impulse response from the zero state: taps at 39 and 58 and their echoes
        s = bits_of(scramble(words_of(x), n, seed_v), n)
        lines.append(f"kind=scramble seed=0x{seed_v:015X} input={_b(x)} output={_b(s)}")
    hdr = ("# Self-synchronous scrambler G(x) = 1 + x^39 + x^58 (49.2.6; 119.2.4.3): s_n = d_n ^ s_{n-39} ^ s_{n-58}.\n"
           "# seed: 58-bit state, bit i = S<i> = the scrambled bit sent i+1 bits before input bit 0\n"
           "# (0x24E6959D0FA5DBD is the initial state quoted for the Annex 119A example).\n"
           "# input/output: bits in sending order.\n"
           + _ORIGIN.format(check="tests check the kernel bit by bit against the recurrence.\n"))
    return _write(d / "scrambler.txt", hdr, lines)


def _am_file(d: Path, rate: str) -> Path:
    """``am_400g.txt`` / ``am_200g.txt``: the alignment markers as symbols and whole AM groups."""
    cfg = PcsConfig(rate=rate)
    syms = am_symbols(cfg.markers)
    lines = [f"kind=am_symbols rate={rate} lane={L} symbols={_s(syms[L])}" for L in range(cfg.n_lanes)]
    groups = am_group_bits(cfg.markers, 2, 0x1FF, 0)
    lines += [f"kind=am_group rate={rate} prbs9_seed=0x1FF status=0 group={g} bits={_b(groups[g])}" for g in range(2)]
    g5 = am_group_bits(cfg.markers, 1, 0x100, 5)[0]
    lines.append(f"kind=am_group rate={rate} prbs9_seed=0x100 status=5 group=0 bits={_b(g5)}")
    extra = ("Table 119-2 (16 lanes)" if rate == "400G" else
             "200G: Table 119-1 values were not available; this uses the documented choice\n"
             "# 'the 400G Table 119-2 rows 0..7' (PcsConfig.am_lanes_200g) [?]")
    hdr = (f"# {rate} alignment markers (119.2.4.4): {extra}.\n"
           "# am_symbols: each 120-bit marker (15 octets CM0 CM1 CM2 UP0 CM3 CM4 CM5 UP1 UM0 UM1 UM2 UP2 UM3 UM4 UM5,\n"
           "# each octet LSB first) as twelve 10-bit symbols, first bit = symbol bit 0; these are the first 12\n"
           "# symbols of PCS lane L after every AM group.\n"
           f"# am_group: the {cfg.am_bits}-bit group = am_txmapped ({120 * cfg.n_lanes} bits, 10-bit lane-pair\n"
           f"# alternation of 119.2.4.4) + {cfg.pad_bits}-bit PRBS9 pad (x^9+x^5+1, Fibonacci, output state[8],\n"
           "# seed bit i = state[i], running on across groups) + tx_am_sf<0>, <1>, <2>; bits in sending order.\n"
           + _ORIGIN.format(check="400G marker octets = the DCMAC/MIISHAT table of the notes, invariants\n"
                            "# asserted; lane 0 = 666 402 866 406 437 630 29 452 755 905 239 50; the 400G group bits 0..2055\n"
                            "# agree with an independent public implementation (MIISHAT fixture, PRBS9 seed all ones, sf=000).\n"))
    return _write(d / f"am_{rate.lower()}.txt", hdr, lines)


def _pair_file(d: Path, rate: str, inp: str, ss: int, ps: int) -> Path:
    """``pair_<rate>_<input>.txt``: one whole codeword pair through the Clause 119 transmit path."""
    res = _pair(rate, inp, ss, ps, 0)
    common = f"rate={rate} input={inp} scrambler_seed=0x{ss:015X} prbs9_seed=0x{ps:03X} status=0"
    lines = [f"kind=codeword_pair {common} codewordA={_s(res.codewords[0, 0])} codewordB={_s(res.codewords[0, 1])}"]
    lines += [f"kind=pair_lane {common} lane={L} symbols={_s(res.lanes[L])}" for L in range(res.lanes.shape[0])]
    hdr = (f"# One full {rate} codeword pair (the first, AM-bearing pair of a stream) through the whole Clause 119 TX:\n"
           "# 66b -> 257b (119.2.4.2) -> scrambler from scrambler_seed (119.2.4.3) -> AM group with PRBS9 pad from\n"
           "# prbs9_seed and status bits (119.2.4.4) -> 10-bit round robin A/B (119.2.4.5) -> RS(544,514)\n"
           "# (119.2.4.6; symbol 0 = coefficient of x^543, first in time, parity last) -> 119.2.4.7 interleave.\n"
           "# input=idle: constant idle 66b blocks (type 0x1E, all /I/); input=counter: all data blocks, payload of\n"
           "# block i = (i + 1) * 0x9E3779B97F4A7C15 mod 2^64.  pair_lane: the symbols PCS lane L sends for this\n"
           "# pair, in time order, each sent bit 0 first.\n"
           + _ORIGIN.format(check="AM prefixes (codewordA/B[0:8] = 666, [8:16] = 402; lane L starts with its\n"
                            "# marker) and RS codewords (all 30 syndromes zero) are checked in tests.\n"))
    return _write(d / f"pair_{rate.lower()}_{inp}.txt", hdr, lines)


def _codec66_file(d: Path, rng: np.random.Generator) -> Path:
    """``codec66.txt``: Clause 82 64b/66b encoding of frames of every length mod 8 (each terminate type),
    minimum size and odd sizes."""
    lines = []
    for n in (60, 61, 62, 63, 64, 65, 66, 67, 100, 1500):
        frame = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        lines.append(f"kind=codec66 frame={frame.hex().upper()} idle_blocks=1 "
                     f"blocks={_blocks_text(frames_to_blocks([frame], idle_blocks=1))}")
    hdr = ("# Clause 82 64b/66b encoding of one MAC frame (82.2.3): frame = octets from the destination address to\n"
           "# the end of the payload (the encoder appends the CRC-32 FCS, least significant octet first); blocks =\n"
           "# start block (/S/ + preamble + SFD, type 0x78), data blocks, terminate block (type 0x87/0x99/.../0xFF by\n"
           "# the number of octets it holds), idle_blocks idle blocks (0x1E), then idles up to a multiple of 4 blocks.\n"
           "# Blocks as SH:HEX (SH = sync header in sending order, HEX = payload as a 64-bit integer, bit i = c<i+2>,\n"
           "# octet k = bits 8k..8k+7).\n"
           + _ORIGIN.format(check="the FCS equals zlib.crc32 and frames round-trip through the decoder (tests).\n"))
    return _write(d / "codec66.txt", hdr, lines)


def _frames_tx_file(d: Path, rng: np.random.Generator) -> Path:
    """``tx_400g_frames.txt``: the whole 400G transmit path from MAC frames to the 16 PCS lanes."""
    frames = tuple(rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (64, 127, 300))
    res = _frames_pair("400G", frames, 0x24E6959D0FA5DBD, 0x1FF, 0)
    common = (f"rate=400G frames={';'.join(f.hex().upper() for f in frames)} scrambler_seed=0x24E6959D0FA5DBD "
              "prbs9_seed=0x1FF status=0")
    lines = [f"kind=frames_tx {common} lane={L} symbols={_s(res.lanes[L])}" for L in range(res.lanes.shape[0])]
    hdr = ("# The whole 400GBASE-R transmit path from MAC frames to the 16 PCS lanes (first, AM-bearing codeword\n"
           "# pair): frames (FCS appended, one idle block after each, idles filling the pair) -> 64b/66b (82.2.3) ->\n"
           "# 257b (119.2.4.2) -> scrambler (119.2.4.3) -> AM group (119.2.4.4) -> A/B round robin (119.2.4.5) ->\n"
           "# RS(544,514) (119.2.4.6) -> interleave (119.2.4.7).  symbols: what PCS lane L sends, each bit 0 first.\n"
           + _ORIGIN.format(check="RX of these lanes returns the frames with good FCS (tests).\n"))
    return _write(d / "tx_400g_frames.txt", hdr, lines)


def _write(path: Path, header: str, lines: list[str]) -> Path:
    atomic_write_text(path, header + "\n".join(lines) + "\n")
    return path
