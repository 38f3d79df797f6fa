"""One registry type for everything chosen by name: models, systems, mappers, allocators,
predictors, iteration-time evaluators and jobs.

A :class:`Registry` maps names to objects (classes, functions or data files). It is a
mutable mapping, so ``name in REG``, ``REG[name]`` and ``sorted(REG)`` work as on a
dict, and a test may swap an entry with ``monkeypatch.setitem``. :meth:`Registry.get`
is what the simulator itself calls: an unknown name is a :class:`ConfigError` that names
the configuration key, suggests the closest known name and lists them all::

    ALLOCATORS = Registry("allocator", key="policy.allocator")

    @ALLOCATORS.register("paged")
    class PagedAllocator(KVAllocator): ...

    cls = ALLOCATORS.get(name)      # ConfigError: policy.allocator: unknown allocator ...

Every entry has a one-line :meth:`Registry.description` (given when it is registered, or
the first sentence of its docstring); ``h2m2sim presets`` and the configuration
reference both print it, so the two never disagree.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

from dram_models.schema import suggest
from h2m2sim.errors import ConfigError

__all__ = ["Registry", "first_sentence"]

T = TypeVar("T")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring on one line, without reST markup."""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    text = re.sub(r":(?:func|mod|class|data|meth|attr):`~?([^`]*)`", r"\1", text)
    text = text.replace("``", "`")
    # a period ends it only before a capital or the end ("Eq. 1", "et al., 2023" do not)
    end = re.search(r"\.(\s+[A-Z]|$)", text)
    return text[:end.start()] if end else text


class Registry(MutableMapping[str, T], Generic[T]):
    """Named objects of one kind (``kind`` names it in messages; ``key`` is the
    configuration key an unknown name is reported under; ``hint`` ends that message,
    e.g. with what else the key accepts)."""

    def __init__(self, kind: str, key: str | None = None, hint: str = ""):
        self.kind = kind
        self.key = key or kind
        self.hint = hint
        self._items: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}

    def register(self, name: str, obj: T | None = None, *, description: str = ""):
        """Add ``obj`` under ``name`` (``description``: one line for listings); without
        ``obj``, a decorator that adds what it decorates. A name is registered once: a
        second object under it is an error."""
        if obj is None:
            def add(target: T) -> T:
                self.register(name, target, description=description)
                return target
            return add
        if name in self._items and self._items[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = obj
        if description:
            self._descriptions[name] = description
        return obj

    def description(self, name: str) -> str:
        """One line on entry ``name``: its registered description, else the first
        sentence of its docstring ('' if it has neither)."""
        if name in self._descriptions:
            return self._descriptions[name]
        obj = self.get(name)
        doc = obj.__doc__ if callable(obj) else None
        if not doc or doc is type(obj).__doc__:
            return ""
        return first_sentence(doc)

    def get(self, name: str, key: str | None = None) -> T:  # type: ignore[override]
        """The object called ``name``; a ConfigError naming ``key`` if there is none."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            names = sorted(self._items)
            raise ConfigError(key or self.key, f"unknown {self.kind} {name!r}"
                              + suggest(str(name), names)
                              + f"; available: {', '.join(names)}"
                              + (f" ({self.hint})" if self.hint else "")) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    # MutableMapping
    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __setitem__(self, name: str, obj: T) -> None:
        self._items[name] = obj

    def __delitem__(self, name: str) -> None:
        del self._items[name]
        self._descriptions.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"

