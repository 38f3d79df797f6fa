"""`h2m2sim presets`: every kind with one line per entry, details of one entry, and
one-line errors with the closest names."""
from __future__ import annotations

import pytest

from h2m2sim.catalog import KINDS
from h2m2sim.cli import main
from h2m2sim.registry import Registry, first_sentence


def test_lists_every_kind_with_a_description_per_entry(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for kind in ("systems", "models", "dram", "chips", "mappers", "allocators",
                 "predictors", "routers", "configs", "traces"):
        assert f"({kind}; h2m2sim presets {kind} NAME for details):" in out
    for name in KINDS.names():
        kind = KINDS[name]()
        for entry in kind.names():
            assert kind.summary(entry), (name, entry)  # nothing listed bare
    line = next(x for x in out.splitlines() if x.split()[:1] == ["greedy"])
    assert "H2M2 Algorithm 1" in line


def test_one_kind(capsys):
    assert main(["presets", "systems"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("system presets (systems;")
    h2m2 = next(x for x in lines if x.split()[0] == "h2m2")
    assert "HBM3 96 GB" in h2m2


@pytest.mark.parametrize("kind,name,fragments", [
    ("systems", "h2m2", ["side hbm", "HBM3-6400 x 64 channels, 96 GB, 3276.8 GB/s, chip h2m2",
                         "side lpddr", "LPDDR5X-8533 x 32 channels, 512 GB",
                         "interconnect  960 GB/s"]),
    ("models", "gpt3-175b", ["layers", "96", "hidden", "12288", "174,604,259,328 (175 B)"]),
    ("dram", "hbm3-6400", ["data rate", "6400 MT/s", "peak bandwidth", "819.2 GB/s",
                           "tRCD", " CK = "]),
    ("mappers", "greedy", ["param policy.mapper_params.translate", "default"]),
    ("allocators", "paged", ["param policy.allocator_params.block_tokens", "default 16 tokens"]),
    ("predictors", "noisy", ["param accuracy", "default 0.9"]),
    ("chips", "h2m2", ["cores", "freq_ghz"]),
    ("configs", "default", ["system", "preset: h2m2", "model", "gpt3-175b"]),
    ("traces", "azure2023_code", ["requests", "8,819", "arrivals"]),
])
def test_details(capsys, kind, name, fragments):
    assert main(["presets", kind, name]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{name} (")
    assert out.splitlines()[1].split()[0] == "description"
    for f in fragments:
        assert f in out, (f, out)


@pytest.mark.parametrize("args,message", [
    (["sytems"], "error: presets: unknown preset kind 'sytems' (did you mean 'systems'?)"),
    (["sytems", "h2m2"], "error: presets: unknown preset kind 'sytems' (did you mean"),
    (["systems", "h2m3"], "error: presets: no system preset 'h2m3' (did you mean 'h2m2'?)"),
    (["dram", "hbm3"], "error: presets: no DRAM standard 'hbm3' (did you mean"),
    (["mappers", "gredy"], "error: presets: no mapper 'gredy' (did you mean 'greedy'?)"),
])
def test_unknown_kind_or_name_is_one_line(capsys, args, message):
    assert main(["presets", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_registry_descriptions():
    reg: Registry = Registry("thing")

    def documented():
        """Does a thing (see Eq. 1 of Smith et al.). More text."""

    reg.register("a", documented)
    reg.register("b", object(), description="given")
    reg.register("c", lambda: None)
    assert reg.description("a") == "Does a thing (see Eq. 1 of Smith et al.)"
    assert reg.description("b") == "given"
    assert reg.description("c") == ""
    assert first_sentence("Uses :func:`~m.f` and ``x``.\n\nMore.") == "Uses m.f and `x`"


def test_every_trace_serve_reads_is_listed_and_described(capsys):
    """`presets traces` lists the Mooncake JSONL trace that serve --trace takes."""
    assert main(["presets", "traces"]) == 0
    out = capsys.readouterr().out
    assert "mooncake2025_conv" in out and "prefix block hashes" in out
    assert main(["presets", "traces", "mooncake2025_conv"]) == 0
    assert "requests" in capsys.readouterr().out


def test_a_multi_card_preset_does_not_call_itself_one_card(capsys):
    assert main(["presets", "systems"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "mlu370-x4" in x)
    assert "one card" not in line and "four cards" in line
