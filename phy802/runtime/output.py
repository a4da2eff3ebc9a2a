"""The one output module: where phy802 may write, and what it may replace or delete.

The rule, for every writer (single files and output folders, libraries and the command line):

* only **regular files** are written and replaced.  A device, FIFO, socket or symbolic link named
  as an output is refused (:class:`OutputRefused`, exit 2 naming the path); with ``force`` a link
  is written *through* (the file it points to is written, the link stays) and a device/FIFO is
  written into (opened, never unlinked or replaced);
* an existing file is replaced only if phy802 wrote it and it is unchanged since, checked from
  **provenance recorded at write time** (not from its name): a record of the file's identity
  (device, inode, size, mtime, ctime) in the user's phy802 state folder, authenticated with an
  HMAC under a per-user secret key (:func:`~phy802.runtime.provenance.state_dir`),
  or an entry of a verified output-set marker.  ``force`` overwrites anyway;
* an output **folder** is replaced as a whole only if it is empty, or if its ``.phy802-output``
  marker is one phy802 wrote for *that* folder (HMAC keyed with the folder's device and inode,
  so a marker copied from elsewhere or edited is not trusted), of the same kind of output
  (``sweep``, ``vectors``, ...), and every entry of the folder is listed in it with the
  identity it had when written.  Nothing that is not listed is ever deleted; ``force`` adds the
  new files into a foreign folder (replacing same-named regular files) and deletes nothing;
* an input of the command is never its own output (nor inside an output folder);
* temporary names stay within the file system's NAME_MAX.

Every write goes through :func:`atomic_open` (temporary file, fsync, ``os.replace``) or
:func:`output_set` (a folder built beside its target and swapped in); temporaries are tracked by
:mod:`phy802.runtime.tempfiles`, written files recorded by :mod:`phy802.runtime.provenance`.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Sequence

from phy802.runtime.provenance import _ident, _mac, _record_file, _secret, is_ours, state_dir
from phy802.runtime.tempfiles import _in_live_dir, _mkdirs, _mkdtemp, _remove, _short_prefix, _track, _umask, _untrack

__all__ = ["OutputExistsError", "OutputRefused", "output_policy", "check_output_file", "atomic_open",
           "atomic_write_text", "atomic_write_bytes", "check_output_dir", "output_set", "SET_MARKER"]

SET_MARKER = ".phy802-output"
_MARKER_FORMAT = "phy802.output-set"
_MARKER_MAX = 16 << 20  # bytes; a marker lists file names and identities, nothing more
_POLICY: dict[str, Any] = {"force": False, "inputs": ()}


class OutputExistsError(FileExistsError):
    """An output location holds data phy802 did not write; it is never replaced."""


class OutputRefused(OutputExistsError):
    """An output location phy802 may not write or replace (a device, FIFO, link, a file or folder
    it did not write, an input of the command); the message names the path and why."""

    def __init__(self, path: str | os.PathLike, why: str) -> None:
        super().__init__(errno.EEXIST, why, os.fspath(path) if os.fspath(path) else "''")


@contextlib.contextmanager
def output_policy(*, force: bool = False, inputs: Iterable[str | os.PathLike] = ()) -> Iterator[None]:
    """Within the block, every writer that is not told otherwise uses this ``force`` and treats
    ``inputs`` as the command's input files (never written).  The command line sets it from each
    command's ``--force`` and its input paths."""
    old = dict(_POLICY)
    _POLICY.update(force=bool(force), inputs=tuple(os.fspath(i) for i in inputs if i is not None))
    try:
        yield
    finally:
        _POLICY.clear()
        _POLICY.update(old)


def _kind_of(mode: int) -> str:
    return ("character device" if stat.S_ISCHR(mode) else "block device" if stat.S_ISBLK(mode)
            else "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode)
            else "symbolic link" if stat.S_ISLNK(mode) else "folder" if stat.S_ISDIR(mode) else "special file")


# ------------------------------------------------------------------ single files: the checks

def _same(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_not_input(path: str, inputs: Sequence[str], *, folder: bool = False) -> None:
    for inp in inputs:
        if not inp or inp == "-":
            continue
        if _same(inp, path):
            raise OutputRefused(path, f"is also an input of this command ({inp}); phy802 never writes over its input")
        if folder:
            r_in, r_out = os.path.realpath(inp), os.path.realpath(path)
            if r_in.startswith(r_out.rstrip(os.sep) + os.sep):
                raise OutputRefused(path, f"holds an input of this command ({inp}); phy802 never replaces its input "
                                          "(write to another folder)")


def resolve_output_file(path: str | os.PathLike, *, force: bool | None = None,
                        inputs: Sequence[str | os.PathLike] | None = None) -> tuple[str, bool]:
    """Check that ``path`` may be written; returns ``(where to write, direct)``: ``direct`` means
    write into it in place (a device or FIFO under ``force``), else write atomically at that path
    (the file a link points to, under ``force``).  Raises :class:`OutputRefused` (or
    ``IsADirectoryError``) otherwise; see the module docstring for the rule."""
    s = os.fspath(path)
    if s == "":
        raise OutputRefused("", "an empty path names no file")
    if _in_live_dir(s):  # inside a folder phy802 is building right now
        if os.path.isdir(s):
            raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file path", s)
        return s, False
    force = _POLICY["force"] if force is None else bool(force)
    ins = [os.fspath(i) for i in (_POLICY["inputs"] if inputs is None else inputs)]
    if s.endswith(("/", os.sep)) or os.path.basename(s) in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, "names a folder, expected a file path", s)
    _check_not_input(s, ins)
    try:
        st = os.lstat(s)
    except FileNotFoundError:
        return s, False
    if stat.S_ISLNK(st.st_mode):
        if not force:
            raise OutputRefused(s, "is a symbolic link; phy802 does not replace links (--force writes through it "
                                   "to the file it points to)")
        real = os.path.realpath(s)
        _check_not_input(real, ins)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return real, False
        s = real
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file path", s)
    if not stat.S_ISREG(st.st_mode):
        if not force:
            raise OutputRefused(s, f"is a {_kind_of(st.st_mode)}, not a regular file; phy802 never replaces it "
                                   "(--force writes into it)")
        return s, True
    if force or is_ours(s):
        return s, False
    raise OutputRefused(s, "exists and was not written by phy802 (or changed since); not overwritten "
                           "(--force to overwrite it)")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, force: bool | None = None,
                inputs=None, **kwargs) -> Iterator[IO]:
    """Open a temporary file next to ``path``; on clean exit it replaces ``path`` atomically.

    What may be written follows the one rule of this module (checked on open and again
    before the rename): a device, FIFO, socket or link is never replaced, an existing file only if
    phy802 wrote it (``force`` -- default: the command's ``--force`` -- overrides; see there), and
    the written file's provenance is recorded.  A crash, exception, Ctrl-C or SIGTERM leaves any
    previous ``path`` untouched and removes the temporary file.  The file's ``name`` is the
    temporary path (other processes may write into it, e.g. :func:`protocol.trace.generate_trace`'s
    workers).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', not {mode!r}")
    where, direct = resolve_output_file(path, force=force, inputs=inputs)
    if direct:  # --force on a device or FIFO: written into, never replaced
        with open(where, mode, **kwargs) as fh:
            yield fh
        return
    target = Path(where)
    _mkdirs(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=_short_prefix(target.name, ".tmp", target.parent), suffix=".tmp",
                               dir=target.parent)
    _track(tmp)
    try:
        os.close(fd)  # reopened by name, so that ``fh.name`` is the path
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would (0666 & ~umask).
        os.chmod(tmp, 0o666 & ~_umask())
        again, direct = resolve_output_file(target, force=force, inputs=inputs)  # a race
        if direct or Path(again) != target:
            raise OutputRefused(target, "changed into something else while it was written; not replaced")
        os.replace(tmp, target)
        _untrack(tmp)
        if not _in_live_dir(target):
            _record_file(target)
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, **kw) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (under the rule of :func:`atomic_open`)."""
    with atomic_open(path, "w", encoding="utf-8", **kw) as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, **kw) -> None:
    """Write ``data`` to ``path`` atomically (under the rule of :func:`atomic_open`)."""
    with atomic_open(path, "wb", **kw) as fh:
        fh.write(data)


def check_output_file(path: str | os.PathLike, *, force: bool | None = None,
                      inputs: Sequence[str | os.PathLike] | None = None) -> None:
    """Refuse, before any work, an output file that :func:`atomic_open` would refuse."""
    resolve_output_file(path, force=force, inputs=inputs)


# ------------------------------------------------------------------ output folders: the marker

def _scan(root: str) -> tuple[dict[str, list[int]], list[str], list[str]]:
    """``(files {rel: identity}, dirs, other entries)`` below ``root``; links are not followed."""
    files: dict[str, list[int]] = {}
    dirs: list[str] = []
    odd: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel) if rel else root) as it:
            for e in it:
                r = f"{rel}/{e.name}" if rel else e.name
                if r == SET_MARKER:
                    continue
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    dirs.append(r)
                    stack.append(r)
                elif stat.S_ISREG(st.st_mode):
                    files[r] = _ident(st)
                else:
                    odd.append(r)
        if len(files) + len(dirs) + len(odd) > 1_000_000:
            raise OutputRefused(root, "holds over a million entries; not an output folder of phy802")
    return files, sorted(dirs), sorted(odd)


def _write_marker(folder: str, kind: str, only: set[str] | None = None) -> None:
    """Sign the listing of ``folder`` (every file with its identity; with ``only``, just those
    paths and the folders above them) for this folder and this user."""
    key = _secret()
    if key is None:  # nothing to sign with: a later run will not replace this folder without --force
        return
    files, dirs, _ = _scan(folder)
    if only is not None:
        files = {r: i for r, i in files.items() if r in only}
        above = {"/".join(r.split("/")[:k]) for r in files for k in range(1, r.count("/") + 1)}
        dirs = [d for d in dirs if d in above]
    fst = os.lstat(folder)
    body = {"kind": kind, "files": files, "dirs": dirs}
    doc = {"format": _MARKER_FORMAT, "version": 2, **body, "mac": _mac(key, "set", [fst.st_dev, fst.st_ino], body)}
    tmp = os.path.join(folder, f"{SET_MARKER}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, os.path.join(folder, SET_MARKER))


def _read_marker(folder: str) -> dict | str:
    """The folder's verified marker, or a sentence saying why there is none to trust."""
    path = os.path.join(folder, SET_MARKER)
    try:
        st = os.lstat(path)
    except OSError:
        return "it has no .phy802-output marker"
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX:
        return "its .phy802-output is not a marker phy802 wrote"
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return "its .phy802-output marker is unreadable"
    ok = (isinstance(doc, dict) and doc.get("format") == _MARKER_FORMAT and doc.get("version") == 2
          and isinstance(doc.get("kind"), str) and isinstance(doc.get("mac"), str)
          and isinstance(doc.get("dirs"), list) and all(isinstance(d, str) for d in doc["dirs"])
          and isinstance(doc.get("files"), dict)
          and all(isinstance(v, list) and len(v) == 5 and all(type(x) is int for x in v) for v in doc["files"].values()))
    if not ok:
        return "its .phy802-output marker is not one phy802 can verify (an older phy802's, or edited)"
    key = _secret()
    if key is None:
        return f"phy802 has no key to verify its marker with ({state_dir()} cannot be written)"
    try:
        fst = os.lstat(folder)
    except OSError:
        return "it is gone"
    body = {"kind": doc["kind"], "files": doc["files"], "dirs": doc["dirs"]}
    if not hmac.compare_digest(doc["mac"], _mac(key, "set", [fst.st_dev, fst.st_ino], body)):
        return ("its .phy802-output marker was not written by phy802 for this folder (copied from elsewhere, "
                "edited, or from another user or machine)")
    return doc


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")


def _folder_state(folder: str, kind: str | None) -> tuple[str, str, dict | None]:
    """``("empty" | "ours" | "update" | "foreign", why, marker)`` of an existing folder: ``ours`` --
    every entry listed, unchanged, in a verified marker of this kind; ``update`` -- such a marker,
    but the folder also holds entries it does not list (the user's, kept as they are)."""
    entries = os.listdir(folder)
    if not entries:
        return "empty", "", None
    m = _read_marker(folder)
    if isinstance(m, str):
        return "foreign", f"it holds {_shown(sorted(entries))} and {m}", None
    if kind is not None and m["kind"] != kind:
        return "foreign", f"it holds a phy802 '{m['kind']}' output, not a '{kind}' one", None
    files, dirs, odd = _scan(folder)
    changed = [r for r, i in sorted(files.items()) if r in m["files"] and m["files"][r] != i]
    if changed:  # the user edited (or replaced) files phy802 wrote: theirs now
        return "foreign", f"files phy802 wrote there were changed since ({_shown(changed)})", None
    extra = odd + [d for d in dirs if d not in set(m["dirs"])] + [r for r in sorted(files) if r not in m["files"]]
    if extra:
        return "update", f"it also holds files phy802 did not write ({_shown(extra)})", m
    return "ours", "", m


def _delete_listed(folder: str, marker: dict) -> bool:
    """Delete what ``marker`` lists (files only while unchanged), then the folder if empty."""
    for rel, ident in marker["files"].items():
        p = os.path.join(folder, *rel.split("/"))
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and _ident(st) == ident:
            os.unlink(p)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, SET_MARKER))
    for rel in sorted(marker["dirs"], key=lambda r: r.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(folder, *rel.split("/")))
    try:
        os.rmdir(folder)
        return True
    except OSError:
        return False


def _plan_set(target: str, kind: str, force: bool, inputs: Sequence[str]) -> tuple[str, str]:
    """``(how, real target)``: ``new`` (absent), ``empty``, ``swap`` (an earlier set of ours) or
    ``merge`` (``force`` on a foreign folder: add files, delete nothing); raises when refused."""
    cwd = os.path.realpath(os.getcwd())
    real = os.path.realpath(target)
    if real == os.sep or cwd == real or cwd.startswith(real.rstrip(os.sep) + os.sep):
        raise OutputRefused(target, "is the current folder or one above it; phy802 will not replace it")
    _check_not_input(target, inputs, folder=True)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return "new", os.path.abspath(target)
    if stat.S_ISLNK(st.st_mode):
        if not force:
            raise OutputRefused(target, "is a symbolic link; phy802 does not replace links (--force writes into the "
                                        "folder it points to)")
        _check_not_input(real, inputs, folder=True)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return "new", real
        if not stat.S_ISDIR(st.st_mode):
            raise OutputRefused(target, f"is a link to a {_kind_of(st.st_mode)}, not a folder; not replaced")
        target = real
    elif not stat.S_ISDIR(st.st_mode):
        raise OutputRefused(target, f"exists and is a {_kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'file'}, "
                                    "not a folder; phy802 will not replace it")
    how, why, _ = _folder_state(target, kind)
    if how == "empty":
        return "empty", os.path.abspath(target)
    if how == "ours":
        return "swap", os.path.abspath(target)
    if how == "update":  # ours, plus the user's own additions: ours replaced, theirs kept
        return "update", os.path.abspath(target)
    if force:
        return "merge", os.path.abspath(target)
    raise OutputRefused(target, f"{why}; choose a new or empty folder (--force adds the new files into it and "
                                "deletes nothing)")


def check_output_dir(path: str | os.PathLike, kind: str = "output", *, force: bool | None = None,
                     inputs: Sequence[str | os.PathLike] | None = None) -> None:
    """Refuse, before any work, an output folder that :func:`output_set` would refuse."""
    s = os.fspath(path)
    if s == "":
        raise OutputRefused("", "an empty path names no folder")
    if _in_live_dir(os.path.abspath(s)):
        return
    _plan_set(s, kind, _POLICY["force"] if force is None else bool(force),
              [os.fspath(i) for i in (_POLICY["inputs"] if inputs is None else inputs)])


def _merge_plan(src: str, dst: str, moves: list[tuple[str, str, str]], ours: dict, force: bool,
                rel: str = "") -> None:
    """The renames that put ``src``'s files into ``dst``; a same-named entry that phy802 did not
    write (not in ``ours`` with its identity) is replaced only with ``force``, and never when it is
    not a regular file."""
    for name in sorted(os.listdir(src)):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        r = f"{rel}/{name}" if rel else name
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            moves.append((s, d, r))
            continue
        if os.path.isdir(s) and not os.path.islink(s):
            if not stat.S_ISDIR(st.st_mode):
                raise OutputRefused(d, f"is a {_kind_of(st.st_mode)} where the output has a folder; not replaced")
            _merge_plan(s, d, moves, ours, force, r)
        elif stat.S_ISREG(st.st_mode):
            if not force and ours.get(r) != _ident(st):
                raise OutputRefused(d, "exists and was not written by phy802 (or changed since); not overwritten "
                                       "(--force to overwrite it)")
            moves.append((s, d, r))
        else:
            raise OutputRefused(d, f"is a {_kind_of(st.st_mode)} where the output has a file; not replaced "
                                   "even with --force")


def _place_into(tmp: str, real: str, kind: str, force: bool, marker: dict | None) -> None:
    """Move the new set's files into the existing folder ``real`` (update / --force merge): only
    files listed unchanged in its verified ``marker`` (or, with ``force``, same-named regular files)
    are replaced; ``marker``'s files the new set does not have are deleted; nothing else is."""
    ours = dict(marker["files"]) if marker else {}
    new_files, _, _ = _scan(tmp)
    moves: list[tuple[str, str, str]] = []
    _merge_plan(tmp, real, moves, ours, force)
    for a, b, _ in moves:
        os.replace(a, b)
    if marker:  # files of the earlier run that this one does not write: ours, unchanged -> removed
        for rel, ident in ours.items():
            if rel in new_files:
                continue
            p = os.path.join(real, *rel.split("/"))
            with contextlib.suppress(OSError):
                if _ident(os.lstat(p)) == ident:
                    os.unlink(p)
        for rel in sorted(marker["dirs"], key=lambda r: r.count("/"), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(real, *rel.split("/")))
    _write_marker(real, kind, only=set(new_files))


@contextlib.contextmanager
def output_set(path: str | os.PathLike, kind: str = "output", *, force: bool | None = None,
               inputs: Sequence[str | os.PathLike] | None = None) -> Iterator[Path]:
    """Build an output folder atomically: yields a temporary sibling folder to write into; on
    success it takes the place of ``path`` as a whole (with a signed ``.phy802-output`` marker), on
    any failure or interrupt it is removed and ``path`` is left exactly as it was.

    ``path`` may be absent, an empty folder, or a folder this rule lets phy802 replace (an
    earlier ``kind`` output of phy802, verified, unchanged); anything else raises
    :class:`OutputRefused` before any work and is never touched -- unless ``force``, which moves
    the new files into it (replacing same-named regular files) and deletes nothing.
    """
    s = os.fspath(path)
    if s == "":
        raise OutputRefused("", "an empty path names no folder")
    force = _POLICY["force"] if force is None else bool(force)
    ins = [os.fspath(i) for i in (_POLICY["inputs"] if inputs is None else inputs)]
    how, real = _plan_set(s, kind, force, ins)
    parent = os.path.dirname(real)
    _mkdirs(Path(parent))
    tmp = _mkdtemp(os.path.basename(real), ".tmp", parent)
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield Path(tmp)
        how, real = _plan_set(s, kind, force, ins)  # again: something may have appeared meanwhile
        if how in ("new", "empty"):
            _write_marker(tmp, kind)
            os.rename(tmp, real)  # one atomic rename (onto an empty folder too)
            _untrack(tmp)
        elif how == "swap":
            _write_marker(tmp, kind)
            old = _mkdtemp(os.path.basename(real), ".old", parent)
            moved = os.path.join(old, "set")
            os.rename(real, moved)
            try:
                os.rename(tmp, real)
            except BaseException:
                os.rename(moved, real)
                raise
            _untrack(tmp)
            m = _read_marker(moved)  # the folder kept its inode: its marker still verifies
            gone = isinstance(m, dict) and _delete_listed(moved, m)
            if gone:
                _remove(old)
            else:
                _untrack(old)
                print(f"phy802: note: the previous {real} had entries it did not list; kept in {moved}",
                      file=sys.stderr)
        else:  # update (ours + the user's additions) or merge (--force into a foreign folder)
            marker = _read_marker(real) if how == "update" else None
            _place_into(tmp, real, kind, force, marker if isinstance(marker, dict) else None)
            _remove(tmp)
    except BaseException:
        _remove(tmp)
        raise
