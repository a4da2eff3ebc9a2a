"""Regenerate vectors/pma/precoder.txt, prbs13q.txt and prbs31q.txt with plain Python.

Independent of phy802's kernels on purpose: the PRBS uses the recurrence form
``b[n] = xor(b[n-k] for each exponent k)`` with the history ``b[-1-i] = S_i`` (seed S0 first), and the
precoder is the textbook loop. gray_map.txt and prbs9q.txt are transcribed from the standard, not
generated here. Run: ``python vectors/pma/_gen/gen_pma_vectors.py``.
"""

from pathlib import Path

GRAY = {(0, 0): 0, (0, 1): 1, (1, 1): 2, (1, 0): 3}  # 120.5.7.1
OUT = Path(__file__).resolve().parents[1]


def prbs_symbols(exponents, seed, count, invert=False):
    n = exponents[0]
    hist = [int(c) for c in reversed(seed)]  # hist[-1-i] = S_i
    bits = []
    for _ in range(2 * count):
        b = 0
        for k in exponents:
            b ^= hist[-k]
        hist.append(b)
        bits.append(b ^ 1 if invert else b)
    assert len(seed) == n
    return "".join(str(GRAY[(bits[2 * j], bits[2 * j + 1])]) for j in range(count))


def precode(g, init):
    out, prev = [], init
    for x in g:
        prev = (x - prev) % 4
        out.append(prev)
    return out


def write(name, header, lines):
    text = "".join(f"# {h}\n" for h in header) + "".join(line + "\n" for line in lines)
    tmp = OUT / (name + ".tmp")
    tmp.write_text(text)
    tmp.replace(OUT / name)


def main():
    for name, exps, desc, std_seed, invert, origin in (
        ("prbs13q", (13, 12, 2, 1), "x^13 + x^12 + x^2 + x + 1", "0000010101011", False,
         "Default seed 0000010101011 [S]: the IEEE 802.3 COM script's PRBS13Q seed (vectors/pma/README.md)."),
        ("prbs31q", (31, 28), "x^31 + x^28 + 1, output inverted (Figure 49-9)", "1" * 31, True,
         "Output inverter [S] (Figure 49-9); default seed all ones: no standard seed found [?]."),
    ):
        n = exps[0]
        recs = []
        seeds = dict.fromkeys((std_seed, "1" * n, "1" + "0" * (n - 1), "0" * (n - 1) + "1"))
        for seed in seeds:
            recs.append(f"kind=prbsq pattern={name} seed={seed} count=1000 "
                        f"symbols={prbs_symbols(exps, seed, 1000, invert)}")
        write(
            f"{name}.txt",
            [
                f"{name.upper()} test pattern (IEEE 802.3 120.5.11.2): {desc}, Fibonacci LFSR S0..S{n - 1},",
                "new bit = xor of S(k-1) over the exponents k, output and shifted into S0; bit pairs {A, B}",
                "Gray mapped. " + origin,
                "The first record uses phy802's default seed; the others are arbitrary regression seeds.",
                "SELF-GENERATED regression vectors: written by vectors/pma/_gen/gen_pma_vectors.py, an",
                "independent plain-Python recurrence b[n] = xor b[n-k]. The PRBS13Q seed and phase were checked",
                "against the COM reference's pinned output (tests/unit/pma/test_prbs_seeds.py).",
            ],
            recs,
        )
    cases = [
        (0, [0, 1, 2, 3, 0, 0, 0, 3, 3, 1, 2, 2, 1, 0, 3, 2]),
        (1, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]),
        (2, [3, 2, 1, 0, 3, 2, 1, 0]),
        (3, [1]),
    ]
    recs = [
        f"kind=precode initial={i} input={''.join(map(str, g))} output={''.join(map(str, precode(g, i)))}"
        for i, g in cases
    ]
    write(
        "precoder.txt",
        [
            "1/(1+D) mod 4 precoder, IEEE 802.3 120.5.7.2: P(j) = (G(j) - P(j-1)) mod 4, P(-1) = initial;",
            "the decoder G(j) = (P(j) + P(j-1)) mod 4 must invert it. The initial state is not pinned by our",
            "sources ([?]); each record states it. Values by vectors/pma/_gen/gen_pma_vectors.py (textbook",
            "loop). Hand check of record 1: G = 0,1,2,3 -> P = 0, 1-0=1, 2-1=1, 3-1=2.",
        ],
        recs,
    )


if __name__ == "__main__":
    main()
