"""Late binding to modules other layers provide (``"package.module:attribute"``).

The run configuration and the runner name their collaborators (section resolvers, mapper
and allocator registries, jobs) by import path, so this package imports even before those
layers exist, a layer can be swapped by editing one table entry, and tests can register
fakes. A table entry may also be the object itself.
"""
from __future__ import annotations

import importlib
from typing import Any

from h2m2sim.errors import SimError

__all__ = ["Unavailable", "import_ref", "optional_ref"]


class Unavailable(SimError):
    """The module or attribute a table entry names does not exist (yet)."""


def import_ref(ref: Any) -> Any:
    """The object named by ``"pkg.mod:attr.sub"``; non-strings are returned unchanged.

    Raises :class:`Unavailable` when the named module (or a parent package of it) or the
    attribute is missing. An ImportError raised *inside* an existing module (a broken
    dependency) propagates unchanged: that is a bug to see, not an absent layer.
    """
    if not isinstance(ref, str):
        return ref
    mod_name, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(mod_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (mod_name == missing or mod_name.startswith(missing + ".")):
            raise Unavailable(f"{ref} is not available: module '{missing}' does not exist "
                              "(not built yet?)") from None
        raise
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Unavailable(f"{ref} is not available: '{mod_name}' has no "
                              f"attribute '{attr}'") from None
    return obj


def optional_ref(ref: Any, default: Any = None) -> Any:
    """Like :func:`import_ref`, but ``default`` when the target is unavailable."""
    try:
        return import_ref(ref)
    except Unavailable:
        return default
