"""The package version, a leaf module every layer may import (the package root offers the
layers' entry points, so taking the version from there would import upward).
"""
try:  # written by setuptools-scm when the package is built (not tracked by git)
    from h2m2sim import _version as _built
except ImportError:  # a source tree that was never built
    _built = None

__version__: str = getattr(_built, "__version__", "0.1.0")

#: The commit setuptools-scm recorded at build time (``git describe``'s ``g``-prefixed
#: node), and whether the tree was dirty; None / False for a tree never built.
BUILT_NODE: str | None = getattr(_built, "node", None) or None
BUILT_DIRTY: bool = bool(getattr(_built, "dirty", False))

__all__ = ["__version__", "BUILT_NODE", "BUILT_DIRTY"]
