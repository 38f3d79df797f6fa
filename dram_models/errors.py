"""User-facing errors shared by dram_models and h2m2sim.

A :class:`ConfigError` always names the offending key (a dotted path such as
``system.sides[1].dram.timing.tRCD``) so that command-line tools can print one line
and exit with status 2 instead of a traceback.
"""
from __future__ import annotations


def join_key(prefix: str, key: str) -> str:
    """Join two parts of a key path: ``join_key('a.b', 'c') == 'a.b.c'``,
    ``join_key('a', '[2]') == 'a[2]'``."""
    if not prefix:
        return key
    if not key:
        return prefix
    if key.startswith("["):
        return prefix + key
    return prefix + "." + key


class SimError(Exception):
    """Base class of every error that is the user's to fix (bad input, out of memory,
    unknown name). Command-line tools print ``str(err)`` and exit with status 2."""


class ConfigError(SimError, ValueError):
    """An invalid configuration value, trace line or command-line argument.

    ``key`` is the full path of the offending entry (may be empty for whole-file
    problems) and ``message`` says what is wrong and what is allowed.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

    def prefixed(self, prefix: str) -> "ConfigError":
        """The same error with ``prefix`` prepended to its key path."""
        return ConfigError(join_key(prefix, self.key), self.message)
