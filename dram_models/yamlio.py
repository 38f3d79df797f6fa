"""Reading the YAML files users hand the simulator, strictly.

Plain ``yaml.safe_load`` accepts a mapping that names a key twice (the last value wins
silently) and expands aliases without bound (a few lines of "billion laughs" YAML become
a structure of 10^9 nodes), and ``Path.read_text`` reads ``/dev/zero`` or waits on a
FIFO forever. Every user-supplied YAML file goes through :func:`read_text` and
:func:`parse`, which refuse each of these with one :class:`ConfigError` line naming the
file (and the line, where there is one).
"""
from __future__ import annotations

import os
import stat
from typing import Any

import yaml

from .errors import ConfigError

__all__ = ["read_text", "parse", "load_file", "MAX_FILE_BYTES", "MAX_NODES", "MAX_DEPTH"]

#: largest YAML file read (bytes): the biggest bundled file is a few KiB
MAX_FILE_BYTES = 16 * 2**20
#: most nodes a document may expand to, aliases counted every time they are used
MAX_NODES = 1_000_000
#: deepest nesting of mappings and lists accepted
MAX_DEPTH = 64


class _Refused(yaml.MarkedYAMLError):
    """A document that parses but is refused (duplicate key, too large, too deep)."""


class StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key given twice in one mapping (merge keys, ``<<``,
    still override as YAML defines) and documents that expand beyond MAX_NODES or nest
    deeper than MAX_DEPTH."""

    def construct_document(self, node):
        _check_size(node)
        return super().construct_document(node)


def _check_size(root) -> None:
    """Refuse ``root`` when it expands to more than MAX_NODES nodes or nests deeper than
    MAX_DEPTH, counting shared (aliased) nodes at every use without walking them again.
    An alias of one of its own ancestors (a recursive structure) is left to the reader
    of the data, which names the key where it happens."""
    size: dict[int, int] = {}
    ancestors: set[int] = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        if done:
            ancestors.discard(id(node))
            size[id(node)] = 1 + sum(size.get(id(k), 0) for k in _children(node))
            if size[id(node)] > MAX_NODES:
                raise _Refused(None, None, f"expands to more than {MAX_NODES:,} values "
                               "(aliases of aliases?)", node.start_mark)
            continue
        if id(node) in size:
            continue
        if depth > MAX_DEPTH:
            raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep",
                           node.start_mark)
        ancestors.add(id(node))
        stack.append((node, depth, True))
        stack.extend((k, depth + 1, False) for k in _children(node)
                     if id(k) not in size and id(k) not in ancestors)


def _children(node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _construct_mapping(loader: StrictLoader, node, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:           # an unhashable key: the constructor reports it
            continue
        if first is not None:
            raise _Refused(None, None, f"duplicate key {key!r} (first given on line "
                           f"{first + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                             _construct_mapping)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def parse(text: str, name: str) -> Any:
    """The data of YAML ``text``; errors are one ConfigError naming ``name`` and the line
    (``name:LINE``) where the parser or a refusal points."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 -- a SafeLoader
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        message = "invalid YAML: " + _one_line(err.problem or err.context or "syntax error")
        ctx = err.context_mark
        if err.context and ctx is not None and mark is not None and ctx.line != mark.line:
            message += f" ({_one_line(err.context)} on line {ctx.line + 1})"
        raise ConfigError(where, message) from None
    except yaml.YAMLError as err:
        raise ConfigError(name, "invalid YAML: " + _one_line(err)) from None
    except RecursionError:
        raise ConfigError(name, f"invalid YAML: nested more than {MAX_DEPTH} levels "
                                "deep") from None
    except (ValueError, OverflowError) as err:  # e.g. an impossible date 2020-13-45
        raise ConfigError(name, "invalid YAML value: " + _one_line(err)) from None


#: How long a FIFO opened before its writer is given to start writing (s): a writer
#: started alongside the reader (``mkfifo p; writer > p & h2m2sim run p``) opens it a
#: moment later, and one that never comes must not hang the command
FIFO_WRITER_WAIT_S = 2.0


def _await_writer(fd: int) -> None:
    """Wait up to :data:`FIFO_WRITER_WAIT_S` for the FIFO ``fd`` (opened without
    blocking) to have data or a writer that has come and gone: until then, a read would
    see the end of a file no writer has opened yet. (Linux reports no hang-up on a FIFO
    that never had a writer.)"""
    import select
    if not hasattr(select, "poll"):
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    poller.poll(FIFO_WRITER_WAIT_S * 1000)


def read_text(path: str | os.PathLike, what: str = "YAML file",
              limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the file ``path``, refused with one ConfigError naming it when
    it is missing, a directory, larger than ``limit`` bytes or not UTF-8 text. A stream
    (a pipe such as ``/dev/stdin`` or a shell's ``<(...)``, a FIFO, a device) is read
    until its end or past ``limit`` bytes, so ``/dev/zero`` is refused by its size."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ConfigError(name, "no such file") from None
    except IsADirectoryError:
        raise ConfigError(name, f"is a directory, expected a {what}") from None
    except OSError as err:
        raise ConfigError(name, f"cannot read: {err.strerror or err}") from None
    mode = os.fstat(fd).st_mode     # before fdopen, which refuses a directory itself
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise ConfigError(name, f"is a directory, expected a {what}")
    if stat.S_ISFIFO(mode):
        _await_writer(fd)
    if not stat.S_ISREG(mode):
        # opened without blocking (a FIFO with no writer yet would hang the open); a
        # stream is read blocking, up to its end or the limit
        os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as err:
            raise ConfigError(name, f"cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise ConfigError(name, f"is larger than {limit // 2**20} MiB; a {what} is "
                                "a few KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(name, f"is not UTF-8 text (byte 0x{data[err.start]:02x} at "
                                f"offset {err.start}); save it as UTF-8") from None


def load_file(path: str | os.PathLike, what: str = "YAML file") -> Any:
    """:func:`parse` of :func:`read_text`."""
    return parse(read_text(path, what), str(path))
