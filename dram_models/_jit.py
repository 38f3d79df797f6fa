"""Compiling the engine without Numba's negative-index wrap-around.

Numba gives every array access with a signed integer index Python's meaning of a negative
index (count from the end): a compare and an add per access, and a data dependence that
keeps LLVM from vectorizing the scheduler's per-bank passes. The engine never indexes
with a negative number, so for its functions that fix-up is pure cost: compiled without
it the engine runs 25-60% faster (interleaved A/B over several compiled copies, see
docs/dev/dram-speed-history.md).

Numba has no per-function switch for it, so :func:`compile_for` compiles an engine
entry point for the given arguments while ``numba.np.arrayobj.fix_integer_index`` is
replaced by a version that only casts the index. Numba compiles (and loads its disk
cache) under one global lock; the replacement is installed and removed while this
thread holds that lock, so no other function, in this thread or another, is ever
compiled with it. Functions the entry point calls are typed, and compiled, in the same
locked section.

The replacement leaves the results unchanged as long as no index is negative; the test
suite checks that with Numba's bounds checking on (``tests/dram/test_dram_boundscheck.py``),
where a negative index is reported instead of wrapping.

``fix_integer_index`` is a Numba internal. Before replacing it, :func:`_patch_target`
checks that it still exists with the arguments replaced here and that Numba's basic
indexing still calls it by that name; with a Numba where it does not (a later release),
the engine is compiled as it is, with the wrap-around: the same results, slower, and
one warning says so. Known to hold: Numba 0.68.1."""
from __future__ import annotations

import inspect
import logging
import warnings

import numba
import numpy as np
import numba.np.arrayobj as _arrayobj
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock

_compiled: set[tuple] = set()
_PARAMS = ["context", "builder", "idxty", "idx", "size"]
_warned = False
_announced = False
log = logging.getLogger(__name__)


def _fix_integer_index_unsigned(context, builder, idxty, idx, size):
    """``fix_integer_index`` without the wrap-around: the index is used as it is."""
    if idxty.signed:
        return context.cast(builder, idx, idxty, types.intp)
    return context.cast(builder, idx, idxty, types.uintp)


def _patch_target() -> bool:
    """Whether this Numba has the internal :func:`compile_for` replaces:
    ``numba.np.arrayobj.fix_integer_index(context, builder, idxty, idx, size)``, looked
    up by name from ``basic_indexing`` (the code of ``a[i]``), so that replacing the
    module's attribute changes what the indexing compiles to."""
    fn = getattr(_arrayobj, "fix_integer_index", None)
    user = getattr(_arrayobj, "basic_indexing", None)
    if not callable(fn) or user is None:
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    code = getattr(user, "__code__", None)
    return params == _PARAMS and code is not None and "fix_integer_index" in code.co_names


def _warn_unpatched() -> None:
    """Warn, once per process, that the engine compiles with the wrap-around."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"dram_models: Numba {numba.__version__} does not have the "
                      "fix_integer_index this package replaces (see dram_models._jit); "
                      "the engine is compiled with Numba's negative-index wrap-around: "
                      "same results, slower", RuntimeWarning, stacklevel=3)


def _type_key(a):
    """What fixes the Numba type of an argument, read far faster than ``numba.typeof``
    (which costs about 10 us per array: a third of a tiny engine run's overhead)."""
    if isinstance(a, np.ndarray):
        f = a.flags
        return (a.dtype.str, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    if isinstance(a, tuple):        # the engine's inputs and state: NamedTuples of arrays
        return type(a), tuple(map(_type_key, a))
    return numba.typeof(a)


def _in_disk_cache(dispatcher, sig) -> bool | None:
    """Whether Numba's disk cache holds ``dispatcher`` compiled for ``sig`` (None: cannot
    tell, e.g. caching off or a Numba without these internals). Reads the cache's small
    index, the first thing Numba reads itself, not the compiled code."""
    try:
        cache = dispatcher._cache
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:                   # noqa: BLE001 -- only a message depends on it
        return None


def _announce(dispatcher, sig) -> None:
    """Say, once per process, that a long compile starts: on a new machine or after an
    update the engine compiles for one to two minutes, and nothing else moves meanwhile."""
    global _announced
    cached = _in_disk_cache(dispatcher, sig)
    name = getattr(dispatcher, "__name__", "engine")
    log.debug("%s: %s", name, {True: "loading from Numba's cache", False: "compiling",
                               None: "loading or compiling"}[cached])
    if _announced or cached:
        return
    _announced = True
    if cached is None:
        log.info("loading the DRAM engine (the first run compiles it: about 1-2 minutes)")
    else:
        log.info("compiling the DRAM engine (first run only, about 1-2 minutes)")


def compile_for(dispatcher, args) -> None:
    """Make sure ``dispatcher`` has a version for the types of ``args`` that was compiled
    (or loaded from the cache) without the wrap-around; a no-op after the first call."""
    key = (id(dispatcher), tuple(map(_type_key, args)))
    if key in _compiled:
        return
    sig = tuple(numba.typeof(a) for a in args)
    patch = _patch_target()
    if not patch:
        _warn_unpatched()
    with global_compiler_lock:
        if sig not in dispatcher.overloads:
            _announce(dispatcher, sig)
            if patch:
                original = _arrayobj.fix_integer_index
                _arrayobj.fix_integer_index = _fix_integer_index_unsigned
            try:
                dispatcher.compile(sig)
            finally:
                if patch:
                    _arrayobj.fix_integer_index = original
        _compiled.add(key)
