import numpy as np
import pytest

from phy802.pcs.scrambler import DEFAULT_SEED, descramble, scramble, seed_to_history
from phy802.pcs.transcode257 import bits_of, words_of


def _reference(d: np.ndarray, seed: int) -> np.ndarray:
    """s_n = d_n ^ s_{n-39} ^ s_{n-58}, with S<i> = s_{-1-i} from the seed (slow)."""
    hist = [(seed >> (57 - k)) & 1 for k in range(58)]  # s_{-58} .. s_{-1}
    s = hist + [0] * d.size
    for n in range(d.size):
        s[58 + n] = int(d[n]) ^ s[58 + n - 39] ^ s[58 + n - 58]
    return np.array(s[58:], np.uint8)


@pytest.mark.parametrize("seed", [0, DEFAULT_SEED, (1 << 58) - 1])
def test_matches_recurrence(seed):
    d = np.random.default_rng(seed & 0xFFFF).integers(0, 2, 3000).astype(np.uint8)
    got = bits_of(scramble(words_of(d), d.size, seed), d.size)
    assert (got == _reference(d, seed)).all()
    assert (bits_of(descramble(words_of(got), d.size, seed), d.size) == d).all()


def test_single_error_multiplies_to_three():
    rng = np.random.default_rng(4)
    d = rng.integers(0, 2, 10000).astype(np.uint8)
    s = bits_of(scramble(words_of(d), d.size), d.size)
    for n in (0, 31, 32, 777, 9000):
        e = s.copy()
        e[n] ^= 1
        out = bits_of(descramble(words_of(e), d.size), d.size)
        assert np.flatnonzero(out != d).tolist() == [n, n + 39, n + 58]


def test_self_synchronising_after_58_bits():
    d = np.random.default_rng(5).integers(0, 2, 500).astype(np.uint8)
    s = scramble(words_of(d), d.size, 12345)
    out = bits_of(descramble(s, d.size, 999), d.size)
    assert (out[58:] == d[58:]).all()


def test_bad_input():
    with pytest.raises(ValueError, match="58-bit"):
        seed_to_history(1 << 58)
    with pytest.raises(ValueError, match="uint64"):
        scramble(np.zeros(4, np.int64), 10)
    with pytest.raises(ValueError, match="shorter"):
        scramble(np.zeros(1, np.uint64), 100)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 100, 127, 128, 129, 150, 191, 192, 257, 1000])
def test_lengths_around_the_word_steps(n):
    d = np.random.default_rng(n).integers(0, 2, n).astype(np.uint8)
    got = bits_of(scramble(words_of(d), n, DEFAULT_SEED), n)
    assert (got == _reference(d, DEFAULT_SEED)).all()
