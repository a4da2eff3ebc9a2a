"""The IEEE 802.3dj Clause 177 inner FEC: a (128,120) code for 200G-per-lane PAM4 links.

Construction, as drafted (D0.1 [S], Table 177-1 transcribed in public 802.3 contributions;
sources in docs/800g.md): 120 message bits = 60 PAM4 symbols.  The two bits that share a PAM4
symbol are XORed, ``m_xor(k) = m(2k) xor m(2k+1)``, k = 0..59; a systematic Hamming(68,60) gives
8 parity bits ``p = m_xor . G (mod 2)`` with the 60 x 8 matrix :data:`G177`; the block is the 120
message bits followed by ``p0 .. p7`` (128 bits, 64 PAM4 symbols).

Why the XOR: with Gray labels (120.5.7.1: 0->00, 1->01, 2->11, 3->10; bit ``2k`` = A, first, is the
MSB) a PAM4 error to a neighbouring level flips exactly one of the symbol's two bits, hence
exactly ``m_xor(k)``; so the decoder sees a binary code of 68 positions -- the 60 message symbols
and the 8 parity bits (which are not XORed: a parity symbol carries two code positions) -- where
one symbol error is one position error.  Every column of the parity-check matrix (the G rows and
the 8 unit vectors) has odd weight and all 68 are distinct, so d = 4: one error is corrected, two
are detected (even nonzero syndrome).

Decoders:

* :func:`decode_hard` (bits only): single-error correction; a message-symbol error is undone by
  flipping bit B, exact when the received level is an outer one, a **documented choice** for the
  inner levels, where the two neighbours are equally likely and the bits alone cannot tell.
* :func:`decode_soft` (PAM4 samples): Chase-2 with ``2^n_lrp`` test patterns on the ``n_lrp``
  least reliable positions (default 2 -> 4 patterns, as contributions describe [S]); reliability =
  distance of the sample to the nearest decision threshold [I].  ``n_lrp=0`` is hard decision
  with the exact symbol rule (the sample says which neighbour).

Test vector: the draft's worked example, as carried by a public implementation of the D0.1
draft (GitHub ``Omer-Sella/802.3``, commit 302a72f, ``ieeeConstants.py`` ``tv1_tp4`` ->
``tv1_parity``, whose G matrix cites the 802.3df contribution bliss_3df_01_220929), also quoted in
the 802.3bs notes: :data:`TV1_MESSAGE` -> parity ``01010001``; G there equals :data:`G177` row by
row (checked by hand against the notes' table when this module was written).
Known-answer files: ``vectors/c177/``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phy802.fec import _inner_kernels as _k

__all__ = [
    "N_BITS",
    "K_BITS",
    "G177",
    "TV1_MESSAGE",
    "TV1_PARITY",
    "encode",
    "encode_numpy",
    "syndromes",
    "decode_hard",
    "decode_hard_numpy",
    "decode_soft",
    "decode_soft_numpy",
    "pam4_samples",
    "STATUS_NAMES",
]

N_BITS = 128
K_BITS = 120
N_POS = 68  # positions of the binary code the decoder sees
#: decoder status codes
STATUS_NAMES = ("ok", "corrected", "uncorrectable")

_G_ROWS = (
    "10010100 01001010 00100101 11001011 10111100 01011110 00101111 11001110 01100111 11101010 "
    "01110101 11100011 10101000 01010100 00101010 00010101 11010011 10110000 01011000 00101100 "
    "00010110 00001011 11011100 01101110 00110111 11000010 01100001 11101001 10101101 10001111 "
    "10011110 01001111 11111110 01111111 11100110 01110011 11100000 01110000 00111000 00011100 "
    "00001110 00000111 11011010 01101101 11101111 10101110 01010111 11110010 01111001 11100101 "
    "10101011 10001100 01000110 00100011 11001000 01100100 00110010 00011001 11010101 10110011"
).split()
#: Table 177-1 (D0.1) as in the notes: ``G177[k, b]`` multiplies ``m_xor(k)`` into parity bit ``b``
G177: NDArray[np.uint8] = np.array([[int(c) for c in row] for row in _G_ROWS], dtype=np.uint8)
G177.setflags(write=False)

#: the draft's worked example (first bit = m(0)) and its parity (p0 first)
TV1_MESSAGE: NDArray[np.uint8] = np.array([int(c) for c in (
    "010110001100110011010110101010110110110110101110101110110011011110101010111110110110100101110101"
    "100000101101010010110000")], dtype=np.uint8)
TV1_PARITY: NDArray[np.uint8] = np.array([0, 1, 0, 1, 0, 0, 0, 1], dtype=np.uint8)
for _a in (TV1_MESSAGE, TV1_PARITY):
    _a.setflags(write=False)


def _tables():
    weights = 1 << np.arange(8)
    rows = (G177.astype(np.int64) * weights).sum(axis=1)  # row k as an 8-bit value, p0 = bit 0
    cols = np.concatenate([rows, weights]).astype(np.int64)
    if len(set(cols.tolist())) != N_POS or any(bin(int(c)).count("1") % 2 == 0 for c in cols):
        raise AssertionError("Clause 177 parity-check columns are not distinct odd-weight values")
    T = np.zeros((8, 256), np.int64)
    for j in range(8):
        for v in range(256):
            acc = 0
            for b in range(8):
                k = 8 * j + b
                if (v >> b) & 1 and k < 60:
                    acc ^= int(rows[k])
            T[j, v] = acc
    pos_of = np.full(256, -1, np.int64)
    pos_of[cols] = np.arange(N_POS)
    for a in (T, pos_of, cols):
        a.setflags(write=False)
    return T, pos_of, cols


_T, _POS_OF, _COLS = _tables()
_NO_SENT = np.zeros((0, N_BITS), np.uint8)


def _as_bits(a, length: int, what: str) -> NDArray[np.uint8]:
    """C-contiguous uint8[N, length] of 0/1, or ValueError naming the first bad element."""
    arr = np.asarray(a)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.uint8)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must be an integer 0/1 array, got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[-1] != length:
        raise ValueError(f"{what} must have last axis of length {length}, got shape {arr.shape}")
    if arr.size:
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{what} must hold bits 0/1; found {arr[idx]} at index {idx}")
    return np.ascontiguousarray(arr.reshape(-1, length), dtype=np.uint8)


def encode(msgs) -> NDArray[np.uint8]:
    """Encode ``uint8[..., 120]`` messages (0/1, ``m(0)`` first) into ``uint8[..., 128]`` blocks."""
    arr = np.asarray(msgs)
    m = _as_bits(arr, K_BITS, "messages")
    out = np.empty((m.shape[0], N_BITS), np.uint8)
    _k.encode(m, _T, out)
    return out.reshape(arr.shape[:-1] + (N_BITS,))


def encode_numpy(msgs) -> NDArray[np.uint8]:
    """Plain-numpy encoder (the construction written out; oracle and benchmark baseline)."""
    m = _as_bits(msgs, K_BITS, "messages")
    mx = m[:, 0::2] ^ m[:, 1::2]
    p = (mx.astype(np.int64) @ G177.astype(np.int64)) & 1
    return np.concatenate([m, p.astype(np.uint8)], axis=1).reshape(np.shape(msgs)[:-1] + (N_BITS,))


def syndromes(words) -> NDArray[np.int64]:
    """8-bit syndrome of each ``uint8[..., 128]`` block (0 = a codeword)."""
    arr = np.asarray(words)
    w = _as_bits(arr, N_BITS, "words")
    out = np.empty(w.shape[0], np.int64)
    _k.syndromes(w, _T, out)
    return out.reshape(arr.shape[:-1])


def decode_hard(words) -> tuple[NDArray[np.uint8], NDArray[np.int8], NDArray[np.int64]]:
    """Hard-decision decoding of ``uint8[..., 128]`` blocks (bits only; module docstring).

    Returns ``(decoded uint8[..., 128], status int8[...], position int64[...])``: status 0 = no
    error seen, 1 = one position corrected (``position`` 0..59 a message symbol, 60..67 parity bit
    ``position - 60``), 2 = detected uncorrectable (block passed on as received); position -1 when
    nothing was corrected.
    """
    arr = np.asarray(words)
    w = _as_bits(arr, N_BITS, "words")
    out = np.empty_like(w)
    st = np.empty(w.shape[0], np.int8)
    where = np.empty(w.shape[0], np.int64)
    _k.decode_hard_bits(w, _T, _POS_OF, out, st, where)
    shp = arr.shape[:-1]
    return out.reshape(shp + (N_BITS,)), st.reshape(shp), where.reshape(shp)


def decode_hard_numpy(words) -> tuple[NDArray[np.uint8], NDArray[np.int8], NDArray[np.int64]]:
    """Plain-numpy :func:`decode_hard` (oracle and benchmark baseline)."""
    w = _as_bits(words, N_BITS, "words").copy()
    H = np.concatenate([G177.astype(np.int64), np.eye(8, dtype=np.int64)])  # [68, 8]
    x = np.concatenate([w[:, 0:120:2] ^ w[:, 1:120:2], w[:, 120:]], axis=1).astype(np.int64)
    s = ((x @ H) & 1) @ (1 << np.arange(8))
    pos = _POS_OF[s]
    st = np.where(s == 0, 0, np.where(pos >= 0, 1, 2)).astype(np.int8)
    fix = np.flatnonzero(st == 1)
    col = np.where(pos[fix] < 60, 2 * pos[fix] + 1, 120 + pos[fix] - 60)
    w[fix, col] ^= 1
    where = np.where(st == 1, pos, -1)
    shp = np.shape(words)[:-1]
    return w.reshape(shp + (N_BITS,)), st.reshape(shp), where.reshape(shp)


def _as_samples(y) -> NDArray[np.float64]:
    arr = np.asarray(y)
    if arr.dtype.kind not in "fiu" or arr.ndim == 0 or arr.shape[-1] != N_BITS // 2:
        raise ValueError(f"samples must be a real array with last axis 64 (PAM4 symbols), got "
                         f"{arr.dtype} {arr.shape}")
    a = np.ascontiguousarray(arr.reshape(-1, N_BITS // 2), dtype=np.float64)
    if a.size and not np.isfinite(a).all():
        raise ValueError("samples must be finite")
    return a


def decode_soft(samples, n_lrp: int = 2, qstep: float = 0.0):
    """Chase-2 decoding of ``float[..., 64]`` PAM4 samples (levels -3, -1, 1, 3; thresholds -2, 0, 2).

    ``n_lrp``: least reliable positions tried (0..6, ``2^n_lrp`` test patterns; default 2 = the 4
    patterns of the contributions [S]); ``qstep``: reliability quantisation step in level units
    (0 = none).  Returns ``(decoded bits uint8[..., 128], status int8[...], n_flips int64[...])``
    (status 0 = unchanged, 1 = corrected, 2 = no valid candidate: the hard decision is passed on).
    """
    if isinstance(n_lrp, bool) or not isinstance(n_lrp, (int, np.integer)) or not 0 <= n_lrp <= 6:
        raise ValueError(f"n_lrp must be an int in 0..6, got {n_lrp!r}")
    if not (isinstance(qstep, (int, float, np.floating)) and np.isfinite(qstep) and qstep >= 0):
        raise ValueError(f"qstep must be a finite number >= 0, got {qstep!r}")
    arr = np.asarray(samples)
    y = _as_samples(arr)
    out = np.empty((y.shape[0], N_BITS), np.uint8)
    st = np.empty(y.shape[0], np.int8)
    nf = np.empty(y.shape[0], np.int64)
    _k.decode_soft(y, _COLS, _POS_OF, int(n_lrp), float(qstep), out, st, nf, _NO_SENT)
    shp = arr.shape[:-1]
    return out.reshape(shp + (N_BITS,)), st.reshape(shp), nf.reshape(shp)


_GRAY = np.array([0, 1, 3, 2], np.uint8)
_LEVEL_OF_BITS = np.array([0, 1, 3, 2], np.uint8)  # 2A + B -> level (00->0, 01->1, 11->2, 10->3)


def pam4_samples(blocks, sigma: float, rng: np.random.Generator) -> NDArray[np.float64]:
    """PAM4 AWGN samples of ``uint8[..., 128]`` blocks: Gray map (A = bit 2k, MSB), levels
    -3, -1, 1, 3, plus N(0, sigma^2) noise (SNR = 5 / sigma^2, :mod:`phy802.theory`)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    arr = np.asarray(blocks)
    b = _as_bits(arr, N_BITS, "blocks")
    lv = _LEVEL_OF_BITS[2 * b[:, 0::2] + b[:, 1::2]]
    y = 2.0 * lv - 3.0 + rng.normal(0.0, float(sigma), lv.shape)
    return y.reshape(arr.shape[:-1] + (N_BITS // 2,))


def decode_soft_numpy(samples, n_lrp: int = 2):
    """Plain-numpy Chase-2 (same rule as :func:`decode_soft`, vectorised over blocks and patterns;
    oracle and benchmark baseline; no quantisation)."""
    y = _as_samples(samples)
    N = y.shape[0]
    lv = np.clip(np.floor((y + 4.0) / 2.0), 0, 3).astype(np.int64)
    g = _GRAY[lv]
    a, b = (g >> 1) & 1, g & 1
    hard = np.empty((N, N_BITS), np.uint8)
    hard[:, 0::2], hard[:, 1::2] = a, b
    av = np.abs(y)
    ra, rb = av, np.abs(av - 2.0)
    rel = np.concatenate([np.minimum(ra, rb)[:, :60], np.stack([ra[:, 60:], rb[:, 60:]], -1).reshape(N, 8)], 1)
    x = np.concatenate([(a ^ b)[:, :60], np.stack([a[:, 60:], b[:, 60:]], -1).reshape(N, 8)], 1)
    s0 = np.bitwise_xor.reduce(np.where(x == 1, _COLS, 0), axis=1)
    lrp = np.argsort(rel, axis=1, kind="stable")[:, :n_lrp]
    masks = np.arange(1 << n_lrp)
    bitsel = (masks[:, None] >> np.arange(n_lrp)) & 1  # [P, L]
    cl = _COLS[lrp]  # [N, L]
    rl = np.take_along_axis(rel, lrp, 1)
    s = s0[:, None] ^ np.bitwise_xor.reduce(np.where(bitsel[None] == 1, cl[:, None, :], 0), axis=2)  # [N, P]
    metric = (bitsel[None] * rl[:, None, :]).sum(-1)
    extra = np.where(s == 0, -1, _POS_OF[s])
    valid = (s == 0) | (extra >= 0)
    ex = np.maximum(extra, 0)
    in_pat = ((lrp[:, None, :] == ex[:, :, None]) & (bitsel[None] == 1)).any(-1) & (extra >= 0)
    relx = np.take_along_axis(rel, ex, 1)
    metric = metric + np.where(extra >= 0, np.where(in_pat, -relx, relx), 0.0)
    metric = np.where(valid, metric, np.inf)
    best = np.argmin(metric, axis=1)  # first minimum = the kernel's tie rule
    ok = np.isfinite(metric[np.arange(N), best])
    out = hard.copy()
    flip = np.zeros((N, N_POS), np.int64)
    sel = bitsel[best]  # [N, L]
    np.add.at(flip, (np.repeat(np.arange(N), n_lrp), lrp.ravel()), (sel * ok[:, None]).ravel())
    eb = extra[np.arange(N), best]
    hit = ok & (eb >= 0)
    np.add.at(flip, (np.flatnonzero(hit), eb[hit]), 1)
    flip &= 1
    r_, p_ = np.nonzero(flip)
    m = p_ < 60
    col = np.where(m, np.where(np.abs(y[r_, np.minimum(p_, 63)]) < 1.0, 2 * p_, 2 * p_ + 1), 120 + p_ - 60)
    out[r_, col] ^= 1
    nf = flip.sum(1)
    st = np.where(~ok, 2, np.where(nf > 0, 1, 0)).astype(np.int8)
    return out, st, nf


# ------------------------------------------------------------------------------ known-answer files


def _bitstr(a) -> str:
    return "".join(str(int(v)) for v in a)


def parse_kat(text: str, source: str = "<string>") -> list[dict]:
    """Parse a ``vectors/c177`` known-answer file (format in its README): returns a list of
    ``{"message", "codeword"}`` (encode) and ``{"received", "decoded", "status"}`` (hard decode)
    records; raises ValueError naming ``source``, the line and the value of the first bad line."""
    recs: list[dict] = []
    want = {"message": K_BITS, "codeword": N_BITS, "received": N_BITS, "decoded": N_BITS}
    cur: dict = {}
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, val = line.partition(":")
        key, val = key.strip(), val.strip().replace(" ", "")
        if key == "inner":
            if val != "c177":
                raise ValueError(f"{source}:{no}: inner code must be c177, got {val!r}")
            continue
        if not sep or key not in (*want, "status"):
            raise ValueError(f"{source}:{no}: expected 'message|codeword|received|decoded|status: ...', got {raw[:40]!r}")
        if key == "status":
            if val not in STATUS_NAMES:
                raise ValueError(f"{source}:{no}: status must be one of {', '.join(STATUS_NAMES)}, got {val!r}")
            cur["status"] = val
        else:
            if len(val) != want[key] or set(val) - {"0", "1"}:
                raise ValueError(f"{source}:{no}: {key} must be {want[key]} bits of 0/1, got {val[:40]!r} "
                                 f"({len(val)} characters)")
            cur[key] = np.array([int(c) for c in val], np.uint8)
        order = ("message", "codeword") if "message" in cur else ("received", "decoded", "status")
        if key not in order or list(cur) != list(order[: len(cur)]):
            raise ValueError(f"{source}:{no}: {key!r} out of order (expected {' then '.join(order)})")
        if len(cur) == len(order):
            recs.append(cur)
            cur = {}
    if cur:
        raise ValueError(f"{source}: incomplete record at the end ({', '.join(cur)})")
    if not recs:
        raise ValueError(f"{source}: no vectors")
    return recs


def check_kat(recs: list[dict]) -> list[str]:
    """Mismatches of the encoder / hard decoder against parsed records (empty list = all pass)."""
    bad = []
    for i, r in enumerate(recs):
        if "message" in r:
            if not np.array_equal(encode(r["message"]), r["codeword"]):
                bad.append(f"vector {i}: encode differs")
        else:
            d, st, _ = decode_hard(r["received"])
            if not np.array_equal(d, r["decoded"]) or STATUS_NAMES[int(st)] != r["status"]:
                bad.append(f"vector {i}: decode differs")
    return bad


def generate_kat(seed: int, n_random: int = 8) -> str:
    """Text of ``vectors/c177/c177.txt``: the draft's worked example, edge messages, ``n_random``
    random messages, and hard-decode vectors (clean, one parity-bit error, one B-bit error on an
    outer level, two errors) -- every codeword cross-checked with :func:`encode_numpy`."""
    rng = np.random.default_rng(seed)
    msgs = [np.asarray(TV1_MESSAGE), np.zeros(K_BITS, np.uint8), np.ones(K_BITS, np.uint8),
            np.tile(np.array([1, 0], np.uint8), 60)]
    msgs += list(rng.integers(0, 2, (n_random, K_BITS), dtype=np.uint8))
    M = np.stack(msgs)
    C = encode(M)
    if not np.array_equal(C, encode_numpy(M)):  # pragma: no cover - guarded by the tests
        raise AssertionError("encoders disagree")
    lines = ["# Clause 177 (128,120) inner code, D0.1 construction (phy802.fec.inner).",
             "# Vector 0 is the draft's worked example (tv1_tp4 -> parity 01010001, see README.md);",
             f"# the rest: all-zero, all-one, alternating, then {n_random} random messages "
             f"(numpy default_rng({seed})).", "", "inner: c177", ""]
    for m, c in zip(M, C):
        lines += [f"message: {_bitstr(m)}", f"codeword: {_bitstr(c)}", ""]
    recv = []
    for j in range(4):
        w = C[4 + j].copy()
        if j == 1:
            w[120 + 3] ^= 1  # parity bit p3
        elif j == 2:
            k = int(np.flatnonzero((w[0:120:2] ^ 1) == w[1:120:2])[0])  # a symbol at an outer level (00/10)
            w[2 * k + 1] ^= 1
        elif j == 3:
            w[[1, 21]] ^= 1  # two message symbols: detected
        recv.append(w)
    for w in recv:
        d, st, _ = decode_hard(w)
        lines += [f"received: {_bitstr(w)}", f"decoded: {_bitstr(d)}", f"status: {STATUS_NAMES[int(st)]}", ""]
    return "\n".join(lines)


def write_kat(folder) -> "Path":
    """Write ``folder/c177.txt`` (:func:`generate_kat` with seed 177, self-checked) atomically."""
    from pathlib import Path

    from phy802.runtime.output import atomic_write_text

    path = Path(folder) / "c177.txt"
    text = generate_kat(seed=177)
    bad = check_kat(parse_kat(text, str(path)))
    if bad:  # pragma: no cover
        raise AssertionError("; ".join(bad))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def _main(argv: list[str] | None = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "regenerate":
        print("usage: python -m phy802.fec.inner regenerate FOLDER", file=sys.stderr)
        return 2
    print(f"wrote {write_kat(args[1])}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
