"""Token folders in nanoGPT's layout: strict checks naming the file, memory-mapped reads, training on them."""

import json
import os
import tracemalloc

import numpy as np
import pytest

import torch

from integration.data import CharCorpus, TokenFileError, TokenFiles, val_windows
from phy802.cli import main


def _write(folder, train, val):
    os.makedirs(folder, exist_ok=True)
    np.asarray(train, dtype="<u2").tofile(os.path.join(folder, "train.bin"))
    np.asarray(val, dtype="<u2").tofile(os.path.join(folder, "val.bin"))
    return str(folder)


def test_batches_are_the_file_windows(tmp_path):
    rng = np.random.default_rng(1)
    train, val = rng.integers(0, 300, 5000), rng.integers(0, 300, 3000)
    tf = TokenFiles(_write(tmp_path / "d", train, val), vocab_size=300, block=16)
    assert isinstance(tf.train, np.memmap) and isinstance(tf.val, np.memmap)
    gen = torch.Generator().manual_seed(3)
    x, y = tf.batch("train", 8, 16, gen)
    assert x.dtype == torch.int64 and x.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])
    for row in x.numpy():  # every row is a window of train.bin
        hits = [i for i in range(len(train) - 16) if np.array_equal(train[i:i + 16], row)]
        assert hits
    vx, vy = tf.val_windows(100, 16)  # ceil(100 / 16) = 7 consecutive windows from the start
    assert vx.shape == (7, 16) and np.array_equal(vx.numpy().ravel(), val[:112])
    assert np.array_equal(vy.numpy().ravel(), val[1:113])
    assert val_windows(val, 10**6, 16)[0].shape == ((len(val) - 1) // 16, 16)  # capped at the split



def test_char_corpus_and_token_files_draw_the_same_windows(tmp_path):
    """Both share the split lookup and the batch offsets (one randint on the generator); only the
    reading differs (tensor indexing vs memmap slices): the same ids give the same batches."""
    rng = np.random.default_rng(2)
    train, val = rng.integers(0, 300, 4000), rng.integers(0, 300, 2000)
    tf = TokenFiles(_write(tmp_path / "d", train, val), vocab_size=300, block=16)
    cc = CharCorpus("".join(map(chr, range(300))), torch.from_numpy(train.astype(np.int64)),
                    torch.from_numpy(val.astype(np.int64)))
    for split in ("train", "val"):
        g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
        for _ in range(3):
            (x1, y1), (x2, y2) = tf.batch(split, 6, 16, g1), cc.batch(split, 6, 16, g2)
            assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.dtype == x2.dtype == torch.int64
    assert all(torch.equal(a, b) for a, b in zip(tf.val_windows(50, 16), cc.val_windows(50, 16)))
    for obj, name in ((tf, os.path.join(str(tmp_path / "d"), "val.bin")), (cc, "val split")):
        with pytest.raises(ValueError, match="split must be 'train' or 'val', got 'test'"):
            obj.batch("test", 1, 4, torch.Generator())
        with pytest.raises(ValueError, match=f"^{name}: 2000 tokens, fewer than one window of 5000 \\+ 1$"):
            obj.batch("val", 1, 5000, torch.Generator())  # CharCorpus raised torch's RuntimeError before

@pytest.mark.parametrize("case,needle", [
    ("missing", "val.bin: missing"), ("empty", "train.bin: empty"), ("odd", "val.bin: odd byte count 6001"),
    ("vocab", "train.bin: token id 300 at position 4321 is >= the vocabulary size 300"),
    ("short", "val.bin: 5 tokens, fewer than one window"),
])
def test_bad_token_files_name_the_file(tmp_path, capsys, case, needle):
    d = _write(tmp_path / "d", np.arange(5000) % 300, np.arange(3000) % 300)
    if case == "missing":
        os.unlink(os.path.join(d, "val.bin"))
    elif case == "empty":
        open(os.path.join(d, "train.bin"), "wb").close()
    elif case == "odd":
        with open(os.path.join(d, "val.bin"), "ab") as fh:
            fh.write(b"\x01")
    elif case == "vocab":
        t = np.arange(5000) % 300
        t[4321] = 300
        _write(d, t, np.arange(3000) % 300)
    else:
        _write(d, np.arange(5000) % 300, np.arange(5) % 300)
    with pytest.raises(TokenFileError, match=needle.replace("(", r"\(")):
        TokenFiles(d, 300, block=16, budget_bytes=1000)  # the bad id lies in a later chunk than the first
    capsys.readouterr()
    rc = main(["train", "--data", d, "--vocab-size", "300", "--steps", "1", "--block-size", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_a_file_larger_than_the_budget_is_never_read_whole(tmp_path):
    """16 MiB of tokens, a 256 KiB budget: opening (the id check) and batches allocate < 2 budgets."""
    budget = 256 << 10
    n = 8 << 20
    d = tmp_path / "big"
    d.mkdir()
    ids = (np.arange(n, dtype=np.uint32) * 2654435761 % 50257).astype("<u2")
    ids.tofile(d / "train.bin")
    ids[: 1 << 16].tofile(d / "val.bin")
    assert os.path.getsize(d / "train.bin") > 60 * budget
    tracemalloc.start()
    try:
        tf = TokenFiles(str(d), 50257, block=1024, budget_bytes=budget)
        gen = torch.Generator().manual_seed(1)
        for _ in range(4):
            x, _y = tf.batch("train", 8, 1024, gen)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * budget, peak
    assert int(x.max()) < 50257
    with pytest.raises(TokenFileError, match="50000"):  # and the check did look at every chunk
        TokenFiles(str(d), 50000, block=1024, budget_bytes=budget)


def test_train_on_a_token_folder(tmp_path, capsys):
    rng = np.random.default_rng(2)
    d = _write(tmp_path / "tok", rng.integers(0, 500, 20000), rng.integers(0, 500, 4000))
    rc = main(["train", "--data", d, "--vocab-size", "500", "--steps", "2", "--n-layer", "2", "--n-embd", "32",
               "--n-head", "2", "--block-size", "16", "--batch-size", "4", "--eval-iters", "1", "--val-tokens", "1000",
               "--ber", "0", "--timeout", "120", "--json"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["vocab"] == {"data": 500, "model": 500, "tied": False} and r["data"] == d
    assert r["val_tokens"] == 63 * 16  # ceil(1000 / 16) windows of 16
    assert len(r["val_loss_replicas"]) == 2 and r["val_loss_replicas"][0] == r["final_val_loss"]
    assert abs(r["final_val_loss"] - np.log(500)) < 0.5  # near uniform after 2 steps on random ids


def _corpus_ids(n: int) -> np.ndarray:
    """Real token ids: the stdlib corpus's characters (ids < 100), n of them."""
    ids = CharCorpus.load("stdlib", "char").train.numpy()
    return ids[:n]


def _zipf_ids(n: int, vocab: int = 50257) -> np.ndarray:
    """A BPE-like stream: ids drawn by rank frequency 1/(rank+1) over GPT-2's vocabulary (seeded)."""
    p = 1.0 / np.arange(1, vocab + 1)
    return np.random.default_rng(7).choice(vocab, size=n, p=p / p.sum())


@pytest.mark.parametrize("layout,needle", [
    ("uint32", "every second 16-bit word is 0"), ("uint32be", "every first 16-bit word of a pair is 0"),
    ("uint8", "high and low bytes of its 16-bit words are distributed alike"),
    ("uint16be", "every id is a multiple of 256"), ("llmc", "llm.c's header"),
])
def test_token_files_of_another_layout_are_refused_naming_the_file(tmp_path, capsys, layout, needle):
    """Regression (hostile sweep): uint32, uint8 and big-endian token files trained without a word."""
    ids = _corpus_ids(40_000)
    d = tmp_path / "d"
    d.mkdir()
    for name in ("train.bin", "val.bin"):
        if layout == "llmc":
            head = np.zeros(256, "<i4")
            head[:3] = (20240520, 1, len(ids))
            data = head.tobytes() + ids.astype("<u2").tobytes()
        else:
            data = ids.astype({"uint32": "<u4", "uint32be": ">u4", "uint8": "u1", "uint16be": ">u2"}[layout]).tobytes()
        (d / name).write_bytes(data)
    with pytest.raises(TokenFileError, match=f"train.bin: not nanoGPT's little-endian uint16 token ids: .*{needle}"):
        TokenFiles(str(d), 50257, block=16)
    rc = main(["train", "--data", str(d), "--steps", "1", "--block-size", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "train.bin" in err and "Traceback" not in err


@pytest.mark.parametrize("dtype,np_dtype", [("uint8", "u1"), ("uint32", "<u4"), ("uint16be", ">u2"), ("uint16", "<u2")])
def test_a_named_layout_reads_the_same_ids(tmp_path, dtype, np_dtype):
    """--data-dtype reads each layout's ids as they are: the same windows as the uint16 file."""
    ids = _corpus_ids(20_000)
    ref = TokenFiles(_write(tmp_path / "ref", ids, ids), 256, block=16)
    d = tmp_path / dtype
    d.mkdir()
    for name in ("train.bin", "val.bin"):
        ids.astype(np_dtype).tofile(d / name)
    tf = TokenFiles(str(d), 256, block=16, dtype=dtype)
    for a, b in zip(tf.batch("train", 4, 16, torch.Generator().manual_seed(5)),
                    ref.batch("train", 4, 16, torch.Generator().manual_seed(5))):
        assert torch.equal(a, b)
    assert torch.equal(tf.val_windows(100, 16)[0], ref.val_windows(100, 16)[0])
    assert TokenFiles.tokens_in(str(d / "val.bin"), dtype) == len(ids)


def test_genuine_uint16_streams_pass_the_layout_checks(tmp_path):
    """The layout rules refuse none of: a char vocabulary's ids, a BPE-like Zipf stream over GPT-2's
    vocabulary, the uniform ids of the other tests; and a big-endian GPT-2 stream that fails the
    vocabulary check is told it looks byte-swapped."""
    from integration.data import layout_problem

    for ids in (_corpus_ids(70_000), _zipf_ids(70_000), np.random.default_rng(1).integers(0, 300, 70_000)):
        assert layout_problem(ids.astype("<u2")) is None
    z = _zipf_ids(20_000)
    d = tmp_path / "be"
    d.mkdir()
    for name in ("train.bin", "val.bin"):
        z.astype(">u2").tofile(d / name)
    with pytest.raises(TokenFileError, match="is >= the vocabulary size 50257; byte-swapped, every id .* big-endian"):
        TokenFiles(str(d), 50257, block=16)
