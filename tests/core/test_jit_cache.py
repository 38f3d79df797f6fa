"""Numba's compiled functions are cached outside the installed package.

Written beside the sources (Numba's default), they stay in ``site-packages`` after
``pip uninstall`` and turn the package folder into an empty namespace package that
shadows a later editable install. The checks run in fresh interpreters, since where
Numba caches is fixed when a function is decorated.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
{pre}
import dram_models, h2m2sim
from dram_models.engine import address, general
from h2m2sim.serving import timing
print(json.dumps([f._cache._cache_path for f in
                  (address._burst_counts, general._loop, timing.interp2)]))
"""


def _cache_paths(tmp_path, env_extra: dict, pre: str = "") -> list[Path]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",
                                                             "XDG_CACHE_HOME")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    return [Path(p) for p in json.loads(out.stdout)]


@pytest.mark.parametrize("pre", ["", "import numba"])
def test_numba_cache_is_in_the_user_cache_directory(tmp_path, pre):
    """Whether Numba was imported first or not: every package's cached functions go to
    $XDG_CACHE_HOME/h2m2sim/numba, none inside the source tree."""
    paths = _cache_paths(tmp_path, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, pre)
    for p in paths:
        assert p.is_relative_to(tmp_path / "xdg" / "h2m2sim" / "numba"), p
        assert not p.is_relative_to(ROOT), p


def test_numba_cache_dir_set_by_the_user_wins(tmp_path):
    paths = _cache_paths(tmp_path, {"NUMBA_CACHE_DIR": str(tmp_path / "mine"),
                                    "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert all(p.is_relative_to(tmp_path / "mine") for p in paths)


@pytest.mark.slow
def test_reinstalling_editable_after_a_run_keeps_the_command_working(tmp_path):
    """The README's install, a run that compiles a cached Numba function, then the
    tutorial's editable install over it: the package must still import, and the first
    install must never have had cache files written into it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    # the dependencies come from this environment, only the package itself is installed
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",
                                                             "PYTHONPATH")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")

    def sh(*args, cwd=tmp_path):
        return subprocess.run(list(args), env=env, cwd=cwd, check=True, capture_output=True,
                              text=True)

    pip = [str(py), "-m", "pip", "-q", "--disable-pip-version-check"]
    sh(*pip, "install", "--no-deps", str(clone))
    sh(str(py), "-c", "import numpy as np, h2m2sim.serving.timing as t; "
                      "t._bracket(np.arange(4.0), 1.5)")
    assert not list((site / "h2m2sim").rglob("*.nb[ic]"))
    assert not list((site / "dram_models").rglob("*.nb[ic]"))
    sh(*pip, "uninstall", "-y", "h2m2sim")
    sh(*pip, "install", "--no-deps", "-e", str(clone))
    out = sh(str(venv / "bin" / "h2m2sim"), "--version").stdout
    assert out.strip()
    sh(str(py), "-c", "import h2m2sim; from h2m2sim import __version__")


def test_the_cache_is_named_for_the_engine_sources(tmp_path):
    """Numba checks a cached function against its own file only: a change to an engine
    module another one compiles in must move to a fresh cache, or the caller would run
    stale code."""
    from dram_models.jit_cache import ENGINE_SOURCES, engine_digest
    paths = _cache_paths(tmp_path, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert {p.relative_to(tmp_path / "xdg" / "h2m2sim" / "numba").parts[0]
            for p in paths} == {f"engine-{engine_digest()}"}
    copy = tmp_path / "engine"
    shutil.copytree(ENGINE_SOURCES[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert engine_digest([copy, ENGINE_SOURCES[1]]) == engine_digest()
    (copy / "general.py").write_text((copy / "general.py").read_text() + "\n# changed\n")
    assert engine_digest([copy, ENGINE_SOURCES[1]]) != engine_digest()
