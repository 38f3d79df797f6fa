"""Output locations, checked before any work: a path shown in one line, the one-line
error for a write that fails, an output folder made writable (and removed again when a
run fails), and the rules that an output is a regular file or a new name and never one
of the command's own inputs. :mod:`h2m2sim.store` writes results into what these check.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from h2m2sim.errors import ConfigError

__all__ = ["SHOWN_PATH_CHARS", "shown_path", "output_error", "path_exists", "given_out",
           "writing_to", "prepare_dir", "prepare_file", "check_regular", "same_file",
           "refuse_inputs", "remove_empty_dirs", "not_a_dir"]

#: characters of a path a message shows; a longer one is cut in the middle
SHOWN_PATH_CHARS = 80


def shown_path(path: str | os.PathLike) -> str:
    """``path`` for a one-line message: as it is, or its start and end with the number
    of characters when it is longer than :data:`SHOWN_PATH_CHARS`."""
    text = os.fsdecode(path)
    if len(text) <= SHOWN_PATH_CHARS:
        return text
    half = SHOWN_PATH_CHARS // 2
    return f"{text[:half]}...{text[-half:]} ({len(text)} characters)"


def _limit(path: str | os.PathLike, name: str, default: int) -> int:
    """``os.pathconf`` value ``name`` of the nearest existing folder above ``path``."""
    for folder in Path(os.path.abspath(path)).parents:
        with contextlib.suppress(OSError, ValueError):
            if folder.is_dir():
                return os.pathconf(folder, name)
    return default


def _too_long(path: str | os.PathLike, out: str | os.PathLike) -> str:
    """Which part of ``path`` (in output folder ``out``) is longer than the file system
    allows, and the limit (in bytes, as the system counts them)."""
    name_max = _limit(path, "PC_NAME_MAX", 255)
    for part in Path(os.fsdecode(path)).parts:
        size = len(os.fsencode(part))
        if size > name_max:     # the name is shown unless the message shows it already
            which = "" if part == Path(out).name else f" ({shown_path(part)})"
            return f"a name of {size} bytes{which}, at most {name_max} allowed"
    path_max = _limit(path, "PC_PATH_MAX", 4096)
    return f"a path of {len(os.fsencode(path))} bytes, at most {path_max} allowed"


def output_error(key: str, path: str | os.PathLike, err: OSError) -> ConfigError:
    """The one-line user error for an OSError met while writing under ``path``: names the
    path (:func:`shown_path`) and the system's reason (and the file, when it is not
    ``path`` itself); a name or path too long also says the limit it exceeds."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENAMETOOLONG:
        reason += f": {_too_long(err.filename or path, path)}"
    elif err.filename:  # name the file too when it lies outside ``path`` (a parent)
        where = Path(os.path.abspath(os.fsdecode(err.filename)))
        inside = Path(os.path.abspath(path))
        if where != inside and inside not in where.parents:
            reason += f" ({shown_path(err.filename)})"
    return ConfigError(key, f"cannot write to {shown_path(path)}: {reason}")


def path_exists(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists; a ConfigError naming it (shortened) when the system cannot
    tell, as for a name longer than the file system allows (``Path.exists`` raises)."""
    try:
        return Path(path).exists()
    except OSError as err:
        raise ConfigError(shown_path(path), f"cannot read: {err.strerror or err}") from None


def given_out(path: str | os.PathLike, key: str = "--out", what: str = "folder") -> Path:
    """``path`` as a Path; an empty one (an unset shell variable) is refused, since
    ``Path("")`` would quietly mean the working folder. ``what``: what the path names,
    for the message (``folder`` or ``file``). Anything but a str or os.PathLike (a
    number, None where a path is required) is refused naming ``key``."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(key, f"must be a path (a str or os.PathLike) naming the {what}, "
                               f"got {type(path).__name__}")
    if not os.fspath(path):
        raise ConfigError(key, f"is empty: name the {what} to write"
                               + (" to" if what == "folder" else ""))
    return Path(path)


@contextlib.contextmanager
def writing_to(path: str | os.PathLike, key: str = "--out") -> Iterator[None]:
    """Turn an OSError raised by the enclosed writes into :func:`output_error`."""
    try:
        yield
    except OSError as err:
        raise output_error(key, path, err) from None


def not_a_dir(path: Path) -> OSError:
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def prepare_dir(path: str | os.PathLike, key: str = "--out") -> Path | None:
    """Make ``path`` an existing directory that this process can write to (creating it
    and its parents, then creating and removing a probe file, which also catches
    read-only file systems and root-squashed mounts that permission bits do not show).
    Returns the topmost directory it created (None if ``path`` existed), for
    :func:`remove_empty_dirs`. Any failure is :func:`output_error`."""
    path = Path(path)
    top = None
    with writing_to(path, key):
        if path.exists() and not path.is_dir():
            raise not_a_dir(path)
        missing = [p for p in (path, *path.parents) if not p.exists()]
        top = missing[-1] if missing else None
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".h2m2sim-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
        except OSError:
            remove_empty_dirs(path, top)
            raise
    return top


def prepare_file(path: str | os.PathLike, key: str,
                 inputs: Iterable[tuple[str, str | os.PathLike]] = ()) -> Path | None:
    """Make the folder of output file ``path`` writable (:func:`prepare_dir`) and check
    that ``path`` is not a directory (nor empty), is a regular file or a new name
    (:func:`check_regular`), and is none of the command's ``inputs`` ((key, path)
    pairs: :func:`refuse_inputs`). Returns what :func:`prepare_dir` returns."""
    path = given_out(path, key, "file")
    with writing_to(path, key):
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        check_regular(path)
    refuse_inputs(path, key, inputs)
    return prepare_dir(path.parent, key)


def check_regular(path: str | os.PathLike) -> None:
    """An OSError when ``path`` exists and is not a regular file (a device such as
    /dev/null, a FIFO, a socket): an atomic writer renames its finished file over the
    old name, which would replace the node itself instead of writing to it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP):
            return      # reported by the write itself, with its own reason
        raise
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket); "
                                    "name a regular file or a new one", os.fspath(path))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode when both exist, else the
    same absolute, resolved path."""
    with contextlib.suppress(OSError, ValueError):
        return os.path.samefile(a, b)
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        return Path(a).resolve() == Path(b).resolve()
    return False


def refuse_inputs(path: str | os.PathLike, key: str,
                  inputs: Iterable[tuple[str, str | os.PathLike]]) -> None:
    """A ConfigError when output ``path`` (of option ``key``) is one of the command's
    input files: writing it would destroy what the command reads."""
    for in_key, in_path in inputs:
        if in_path is not None and os.fspath(in_path) and same_file(path, in_path):
            raise ConfigError(key, f"{shown_path(path)} is also the input {in_key}: "
                                   "writing it would overwrite it; choose another name")


def remove_empty_dirs(leaf: str | os.PathLike, top: str | os.PathLike | None) -> None:
    """Remove ``leaf`` and its parents up to ``top`` (included) while they are empty;
    nothing when ``top`` is None (the folders existed before)."""
    if top is None:
        return
    leaf, top = Path(leaf), Path(top)
    for d in (leaf, *leaf.parents):
        try:
            d.rmdir()
        except OSError as err:
            # ENOENT, ENAMETOOLONG: never made (a mkdir of several levels failed part way)
            if err.errno not in (errno.ENOENT, errno.ENAMETOOLONG):
                return
        if d == top:
            return
