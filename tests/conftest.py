"""Test-suite settings.

Hypothesis runs derandomized by default, so the suite is deterministic: the same commit
gives the same examples on every machine and in CI (a red CI always means the code).
`HYPOTHESIS_PROFILE=explore python -m pytest` draws fresh random examples (and more of
them) to hunt for new counterexamples; add any it finds with `@example`.
"""
import os

from hypothesis import settings

settings.register_profile("default", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
