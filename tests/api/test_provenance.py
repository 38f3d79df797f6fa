"""What results record about where they came from (version, git revision, software and
host), and that stored files get the permissions the umask gives."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import h2m2sim
from h2m2sim import store, version
from h2m2sim.config import EXAMPLE_YAML

ROOT = Path(__file__).resolve().parents[2]
ENV_KEYS = {"python", "numpy", "numba", "cpu", "platform"}


pytestmark = pytest.mark.usefixtures("fake_layers")


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_stored_files_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    store.atomic_write_text(tmp_path / "a.json", "{}")
    with store.atomic_output_path(tmp_path / "b.npz") as tmp:
        tmp.write_bytes(b"x")
    out = store.RunOutput(tmp_path / "run")
    out.prepare()
    out.write({"metrics": {}}, "x: 1\n", {"wall_s": 1.0})
    for f in (tmp_path / "a.json", tmp_path / "b.npz", *(tmp_path / "run").iterdir()):
        assert f.stat().st_mode & 0o777 == mode, f


def test_run_records_provenance_beside_the_wall_times(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(EXAMPLE_YAML)
    r = h2m2sim.run(cfg, out=tmp_path / "out")
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert set(result) == {"config_hash", "h2m2sim_version", "git_revision", "metrics"}
    assert set(timing["environment"]) == ENV_KEYS
    assert timing["environment"]["numpy"] == __import__("numpy").__version__
    assert timing["environment"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert r.provenance["environment"] == timing["environment"]
    assert not ENV_KEYS & set(r.metrics)


def test_sweep_meta_records_the_environment(tmp_path):
    spec = {"base": {"system": "h2m2", "model": "gpt3-175b"},
            "grid": {"workload.seq": [64, 128]}}
    h2m2sim.sweep(spec, tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert set(meta["environment"]) == ENV_KEYS and "git_revision" in meta


def test_cpu_model_is_named():
    assert store.cpu_model()


def test_built_revision_reads_the_baked_file(monkeypatch):
    monkeypatch.setattr(version, "BUILT_NODE", "g0123abcd")
    monkeypatch.setattr(version, "BUILT_DIRTY", True)
    assert store.built_revision() == "0123abcd+dirty"
    monkeypatch.setattr(version, "BUILT_NODE", None)
    assert store.built_revision() is None


def test_version_reads_the_baked_file():
    """The leaf module takes the version and commit setuptools-scm wrote at build time."""
    code = ("import sys, types\n"
            "sys.modules['h2m2sim._version'] = types.SimpleNamespace(\n"
            "    __version__='9.9.9', node='gabc', dirty=True)\n"
            "from h2m2sim import version, store\n"
            "assert version.__version__ == '9.9.9' and store.built_revision() == 'abc+dirty'\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr


@pytest.mark.slow
def test_installed_wheel_records_the_revision_it_was_built_from(tmp_path):
    """Build a wheel from a clean clone (as pip install . does), unpack it inside an
    unrelated git repository, and ask it for its revision."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(clone)], check=True)
    site = tmp_path / "user-project" / "site"
    (wheel,) = (tmp_path / "dist").glob("h2m2sim-*.whl")
    zipfile.ZipFile(wheel).extractall(site)
    user = site.parent   # a user's own repository that the environment sits in
    for cmd in (["init", "-q"], ["-c", "user.name=u", "-c", "user.email=u@x", "commit",
                                 "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(user), *cmd], check=True)
    code = ("import h2m2sim, h2m2sim.store as s\n"
            "print(h2m2sim.__version__, s.git_revision())\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(site)}, check=True)
    version, rev = p.stdout.split()
    assert head.startswith(rev) and len(rev) >= 7
    assert version == wheel.name.split("-")[1]
