"""Test-suite settings.

Hypothesis runs derandomized by default, so the suite is deterministic: the same commit
gives the same examples on every machine and in CI (a red CI always means the code).
`HYPOTHESIS_PROFILE=explore python -m pytest` draws fresh random examples (and more of
them) to hunt for new counterexamples; add any it finds with `@example`.
"""
import os

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


#: most test processes (pytest-xdist): each loads Numba and compiles what it runs first
MAX_TEST_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the default options): one process per usable core, at most
    MAX_TEST_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return max(1, min(MAX_TEST_WORKERS, cores))


#: What compiles the DRAM engine's two controllers: a closed-loop NPU run (the general
#: event loop) and a trace bench (the lean read controller).
WARM_UPS = (
    ["-m", "h2m2sim", "run", "workloads/configs/default.yaml", "--set", "model=opt-1.3b",
     "--set", "workload.batch=4", "--set", "policy.baseline=null", "--json"],
    ["-m", "dram_models.bench", "--standard", "lpddr5-6400", "--pattern", "random",
     "--requests", "2000", "--json"],
)


def pytest_sessionstart(session):
    """With several test processes, compile the DRAM engine first, its two controllers
    in two processes at once, into the Numba cache the test processes then load from:
    each test process would otherwise compile all of it for itself, at the same time
    (in CI, with an empty cache, minutes of both cores). Already compiled, this takes
    a few seconds."""
    config = session.config
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not workers or workers == 1:
        return
    import subprocess
    import sys
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "H2M2SIM_CACHE": cache}
        procs = [subprocess.Popen([sys.executable, *args], cwd=root, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for args in WARM_UPS]
        for proc in procs:       # a failure shows in the tests that need the engine
            proc.communicate()


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache(tmp_path_factory):
    """The suite keeps the pieces it simulates in a result cache of its own (shared by
    its tests and by its test processes, removed with pytest's temporary folders), never
    in the user's ``~/.cache/h2m2sim``. Spawned processes (sweep workers, scripts)
    inherit it. Several test processes write it at once as sweep workers do (each entry
    renamed into place whole): what one of them simulated, the others reuse."""
    before = os.environ.get("H2M2SIM_CACHE")
    base = tmp_path_factory.getbasetemp()
    # a test process of pytest-xdist has a folder of its own in the run's folder
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / \
        "h2m2sim-cache"
    cache.mkdir(exist_ok=True)
    os.environ["H2M2SIM_CACHE"] = str(cache)
    yield
    if before is None:
        os.environ.pop("H2M2SIM_CACHE", None)
    else:
        os.environ["H2M2SIM_CACHE"] = before


@pytest.fixture
def fake_layers(monkeypatch):
    """The physics layers replaced by the fakes of tests/fakes.py, which implement the
    same interfaces (for tests of the framework: config, CLI, sweeps, store, plots)."""
    import fakes
    fakes.install(monkeypatch.setitem)


@pytest.fixture
def cfg_path(tmp_path):
    """The example run configuration, written to a file."""
    from h2m2sim.config import EXAMPLE_YAML
    p = tmp_path / "run.yaml"
    p.write_text(EXAMPLE_YAML)
    return p
