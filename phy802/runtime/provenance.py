"""Provenance of written files: who wrote a file, and is it unchanged since.

phy802 replaces an existing file only if it wrote that file and nobody changed it since (the rule in
:mod:`phy802.runtime.output`).  That is decided from records made at write time, never from a
file's name:

* each file's identity -- device, inode, size, mtime and ctime (:func:`_ident`): any edit, copy,
  chmod or replacement changes it;
* the **written-files record** (``written.json`` in :func:`state_dir`): the real path and identity
  of each single output file phy802 wrote, each entry with an HMAC-SHA256 under this user's
  32-byte key (``output-key``, mode 0600, made on first use), at most 20,000 entries (files gone
  or changed are forgotten first, then the oldest);
* output folders carry their own signed listing instead (the ``.phy802-output`` marker, written
  and verified in :mod:`phy802.runtime.output` with the same key and :func:`_mac`).

Where the state folder cannot be written, nothing is recorded and nothing existing is replaced
without ``--force``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, Iterator

__all__ = ["state_dir", "is_ours"]

_REGISTRY_MAX = 20000  # single files remembered (newest kept)
_KEY_CACHE: dict[str, bytes] = {}
_REG_LOCK = threading.Lock()


def state_dir() -> Path:
    """The folder of phy802's own state: the secret key that signs provenance records and the
    record of single files written (``$PHY802_STATE_DIR``, else ``$XDG_STATE_HOME/phy802``, else
    ``~/.local/state/phy802``)."""
    env = os.environ.get("PHY802_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "phy802"


def _secret() -> bytes | None:
    """This user's 32-byte provenance key (created 0600 on first use); ``None`` where the state
    folder cannot be written: then nothing is recorded and nothing existing is replaced."""
    d = state_dir()
    cached = _KEY_CACHE.get(str(d))
    if cached is not None:
        return cached
    f = d / "output-key"
    key = None
    for _ in range(2):
        try:
            fd = os.open(f, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                st = os.fstat(fd)
                data = os.read(fd, 64) if stat.S_ISREG(st.st_mode) else b""
            finally:
                os.close(fd)
            key = data if len(data) == 32 else None
            break
        except FileNotFoundError:
            try:
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = d / f".output-key.{os.getpid()}.{os.urandom(4).hex()}"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, os.urandom(32))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, f)  # atomic create-if-absent: two first runs agree on one key
                except FileExistsError:
                    pass
                finally:
                    os.unlink(tmp)
            except OSError:
                return None
        except OSError:
            return None
    if key is not None:
        _KEY_CACHE[str(d)] = key
    return key


def _mac(key: bytes, *parts: Any) -> str:
    return hmac.new(key, json.dumps(parts, separators=(",", ":"), sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _ident(st: os.stat_result) -> list[int]:
    """What identifies one written version of a file: any edit, copy, chmod or replacement changes it
    (ctime cannot be set back by a user)."""
    return [int(st.st_dev), int(st.st_ino), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns)]


# ------------------------------------------------------------------ single files: the record

@contextlib.contextmanager
def _registry_locked() -> Iterator[Path]:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _REG_LOCK, open(d / "written.lock", "a") as lk:
        try:
            import fcntl

            fcntl.flock(lk.fileno(), fcntl.LOCK_EX)
        except (ImportError, OSError):  # no locks here: the rename below is still atomic
            pass
        yield d / "written.json"


def _load_registry(path: Path) -> dict:
    try:
        if os.lstat(path).st_size > (64 << 20):
            return {}
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    ents = obj.get("entries") if isinstance(obj, dict) else None
    return ents if isinstance(ents, dict) else {}


def _record_file(path: str | os.PathLike) -> None:
    """Remember that phy802 wrote ``path`` as it is now (called right after the final rename)."""
    key = _secret()
    if key is None:
        return
    real = os.path.realpath(path)
    try:
        st = os.lstat(real)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    ident = _ident(st)
    try:
        with _registry_locked() as reg:
            ents = _load_registry(reg)
            ents.pop(real, None)
            ents[real] = [*ident, _mac(key, "file", real, ident)]
            if len(ents) > 2000:  # forget files that are gone or changed, then the oldest
                live = {}
                for p, e in ents.items():
                    try:
                        if isinstance(e, list) and e[:5] == _ident(os.lstat(p)):
                            live[p] = e
                    except OSError:
                        pass
                ents = dict(list(live.items())[-_REGISTRY_MAX:])
            tmp = reg.with_name(f".written.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"format": "phy802.written", "version": 1, "entries": ents}, fh)
            os.replace(tmp, reg)
    except OSError:
        pass


def _registered(real: str, st: os.stat_result) -> bool:
    key = _secret()
    if key is None:
        return False
    e = _load_registry(state_dir() / "written.json").get(real)
    ident = _ident(st)
    return (isinstance(e, list) and len(e) == 6 and e[:5] == ident and isinstance(e[5], str)
            and hmac.compare_digest(e[5], _mac(key, "file", real, ident)))


def is_ours(path: str | os.PathLike) -> bool:
    """True when ``path`` is a regular file phy802 wrote as a single output file and nobody changed
    since (recorded at write time)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    # only the record of single files counts: a file of an output set belongs to its set (replacing
    # it alone would leave a set that no longer matches its marker)
    return _registered(os.path.realpath(path), st)
