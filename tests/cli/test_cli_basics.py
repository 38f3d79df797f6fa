import subprocess
import sys

from h2m2sim.cli import main


def test_help_lists_and_exit_code(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "h2m2sim", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith("h2m2sim ")
