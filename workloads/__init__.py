"""Workload data shipped with h2m2sim: the LLM model zoo (``models/*.yaml``), serving
engine profiles (``engines/*.yaml``), request traces (``traces/``), example run
configurations (``configs/``) and hardware measurements (``hardware/``) that presets are
checked against."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MODELS_DIR = ROOT / "models"
CONFIGS_DIR = ROOT / "configs"
TRACES_DIR = ROOT / "traces"
ENGINES_DIR = ROOT / "engines"
