"""dram_models._jit replaces a Numba internal only where it finds it as expected; with a
Numba that has it otherwise, engine functions compile as they are (Numba's own
negative-index wrap-around), and one warning says so."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import njit

from dram_models import _jit


def test_the_installed_numba_has_the_internal_it_replaces():
    assert _jit._patch_target()


def test_a_missing_internal_is_not_replaced(monkeypatch):
    monkeypatch.delattr(_jit._arrayobj, "fix_integer_index")
    assert not _jit._patch_target()


def test_another_signature_compiles_normally_and_warns_once(monkeypatch):
    monkeypatch.setattr(_jit, "_PARAMS", ["context", "builder", "index_type", "index"])
    monkeypatch.setattr(_jit, "_warned", False)
    original = _jit._arrayobj.fix_integer_index

    @njit
    def last(a, i):
        return a[i]

    @njit
    def first(a, i):
        return a[i]

    a = np.arange(3, dtype=np.int64)
    with pytest.warns(RuntimeWarning, match="wrap-around"):
        _jit.compile_for(last, (a, -1))
    assert last(a, -1) == 2                 # Numba's own indexing: -1 is the last
    assert _jit._arrayobj.fix_integer_index is original
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the second compile does not warn again
        _jit.compile_for(first, (a, 0))
    assert first(a, 0) == 0
