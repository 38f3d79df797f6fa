"""tools/engine_profile.py: the parsing and attribution behind the engine's line-level
profile, on small synthetic objdump / perf / source texts (the profiling itself needs
perf and a debug-info compile, so it is a tool, not a test)."""
from __future__ import annotations

import json

from scriptmod import load_tool

ep = load_tool("engine_profile")

ENGINE = "/src/dram_models/engine/general.py"

SOURCE = """import numpy as np

@njit
def helper(a):
    return a + 1


def _loop(n):
    s = 0
    while s < n:
        # ---- 1. first part ----
        s = helper(s)
        # ---- 2. second part ------
        s += 1
    return s

def outer():
    def inner():
        return 1
    return inner
"""

OBJDUMP = f"""
engine.o:     file format elf64-x86-64


Disassembly of section .ltext:

0000000000000000 <_channels>:
_channels():
{ENGINE}:9
   0:\tpush   %rbx
   1:\tmov    0x8(%rsp),%rax
{ENGINE}:10
   6:\tadd    %rax,%rbx
   9:\tcmp    $0x1,%rbx
{ENGINE}:5
   d:\tlea    0x1(%rbx),%rbx
{ENGINE}:12
  11:\tmov    %rbx,0x10(%rsp)
  16:\tjne    6 <_channels+0x6>
{ENGINE}:14 (discriminator 2)
  18:\tinc    %rbx
  1b:\tret

0000000000000020 <other>:
other():
  20:\tnop
/lib/numba/cpython/builtins.py:7
  21:\tret
"""


def test_objdump_lines_carry_forward_and_reset_per_symbol():
    insns = ep.parse_objdump(OBJDUMP)
    got = {a: (f, l) for a, f, l, _ in insns}
    assert got == {0x0: (ENGINE, 9), 0x1: (ENGINE, 9), 0x6: (ENGINE, 10),
                   0x9: (ENGINE, 10), 0xd: (ENGINE, 5), 0x11: (ENGINE, 12),
                   0x16: (ENGINE, 12), 0x18: (ENGINE, 14), 0x1b: (ENGINE, 14),
                   0x20: (None, None), 0x21: ("/lib/numba/cpython/builtins.py", 7)}
    assert [a for a, *_ in insns] == sorted(got)
    assert insns[1][3] == "mov    0x8(%rsp),%rax"


def test_function_ranges_and_loop_sections():
    assert ep.function_ranges(SOURCE) == [("helper", 3, 5), ("_loop", 8, 15),
                                          ("outer", 17, 20), ("inner", 18, 19)]
    assert ep.loop_sections(SOURCE, 8, 15) == [(11, "1. first part"),
                                               (13, "2. second part")]
    assert ep.loop_sections(SOURCE, 8, 10) == []
    label = ep.line_labeler(SOURCE)
    assert [label(n) for n in range(1, 21)] == [
        "(module level)", "(module level)", "helper", "helper", "helper",
        "(module level)", "(module level)",
        "_loop: loop setup", "_loop: loop setup", "_loop: loop setup",
        "_loop: 1. first part", "_loop: 1. first part",
        "_loop: 2. second part", "_loop: 2. second part", "_loop: 2. second part",
        "(module level)", "outer", "inner", "inner", "outer"]


def test_real_engine_loop_has_sections():
    src = ep.LOOP_FILE.read_text()
    (first, last), = [(f, l) for n, f, l in ep.function_ranges(src) if n == "_loop"]
    sections = ep.loop_sections(src, first, last)
    assert sections and sections[0][1].startswith("1.")


BASE = 0x7F0000001000
OFFSETS = ([0x0, 0x1, 0x3, 0x5]            # line 9 (0x3, 0x5: inside the insn at 0x1)
           + [0x6, 0x6, 0x6, 0x9]          # line 10
           + [0xd, 0x10]                   # line 5 (helper, inlined)
           + [0x11, 0x11, 0x11, 0x11, 0x16]  # line 12
           + [0x18, 0x1e]                  # line 14 (0x1e: padding after the ret)
           + [0x20]                        # no line info
           + [0x21]                        # builtins.py
           + [0x30, -1])                   # outside: past the section, before it
KERNEL_IPS = [0xFFFFFFFF81000000, 0xFFFFFFFF81234567]


def _attribute(top=3):
    ips = [BASE + o for o in OFFSETS] + KERNEL_IPS
    return ep.attribute(ips, [(BASE, 0x30, 0)], ep.parse_objdump(OBJDUMP), {ENGINE: SOURCE},
                        top)


def test_attribution_counts_groups_and_lines():
    a = _attribute()
    assert (a["samples"], a["engine_samples"], a["outside_samples"]) == (23, 19, 4)
    assert (a["kernel_samples"], a["other_user_samples"]) == (2, 2)
    assert a["engine_share"] == 19 / 23
    assert a["stack_samples"] == 7            # 0x1, 0x3, 0x5 and four at 0x11
    assert a["stack_share_of_engine"] == 7 / 19
    assert [(g["group"], g["samples"]) for g in a["by_group"]] == [
        ("_loop: loop setup", 8), ("_loop: 1. first part", 5),
        ("_loop: 2. second part", 2), ("helper", 2),
        ("(no line info)", 1), ("builtins.py (not the engine)", 1)]
    g = a["by_group"][0]
    assert (g["share"], g["share_of_engine"]) == (8 / 23, 8 / 19)
    assert [(t["line"], t["samples"], t["group"], t["text"]) for t in a["top_lines"]] == [
        (12, 5, "_loop: 1. first part", "s = helper(s)"),
        (9, 4, "_loop: loop setup", "s = 0"),
        (10, 4, "_loop: loop setup", "while s < n:")]
    assert a["top_lines"][0]["share"] == 5 / 23


def test_attribution_through_a_second_region():
    # samples in another copy of the object's bytes 0x11..0x18 count as there
    elsewhere = 0x7F5000000000
    regions = [(BASE, 0x30, 0), (elsewhere, 0x8, 0x11)]
    a = ep.attribute([elsewhere, elsewhere + 5, elsewhere + 7, elsewhere + 8], regions,
                     ep.parse_objdump(OBJDUMP), {ENGINE: SOURCE})
    assert (a["engine_samples"], a["other_user_samples"]) == (3, 1)
    assert [(t["line"], t["samples"]) for t in a["top_lines"]] == [(12, 2), (14, 1)]
    assert a["stack_samples"] == 1


def test_attribution_of_other_files_and_no_line():
    rows = {(t["file"], t["line"]): t for t in _attribute(top=10)["top_lines"]}
    assert rows[(None, None)]["group"] == "(no line info)"
    other = rows[("/lib/numba/cpython/builtins.py", 7)]
    assert other["samples"] == 1 and other["text"] == ""
    assert rows[(ENGINE, 5)]["group"] == "helper"
    assert rows[(ENGINE, 14)]["samples"] == 2


def test_symbols_sections_and_perf_script():
    syms = ep.parse_symbols(
        "\nengine.o:     file format elf64-x86-64\n\nSYMBOL TABLE:\n"
        "0000000000000000 l    d  .ltext\t0000000000000000 .ltext\n"
        "0000000000000040 g     F .ltext\t00000000000031e1 _ZN_channels\n"
        "000000000000bf40  w    F .ltext\t0000000000009ccb _ZN_loop\n"
        "0000000000000bf0 l     O .rodata\t000000000000003d .const.Error creating tuple\n"
        "0000000000000000         *UND*\t0000000000000000 PyErr_Clear\n")
    assert syms["_ZN_channels"] == (".ltext", 0x40, 0x31E1)
    assert syms["_ZN_loop"] == (".ltext", 0xBF40, 0x9CCB)
    assert syms[".const.Error creating tuple"] == (".rodata", 0xBF0, 0x3D)
    assert "PyErr_Clear" not in syms
    sizes = ep.parse_section_sizes(
        "Idx Name          Size      VMA               LMA               File off  Algn\n"
        "  0 .text         00000000  0000000000000000  0000000000000000  00000040  2**2\n"
        "                  CONTENTS, ALLOC, LOAD, READONLY, CODE\n"
        "  2 .ltext        00015c38  0000000000000000  0000000000000000  00000090  2**4\n")
    assert sizes == {".text": 0, ".ltext": 0x15C38}
    assert ep.parse_perf_script("17993.529097:  ffffffff81b9764c\n"
                                "17993.530275:      7f2d58b2a813\n"
                                "garbage\n") == [(17993.529097, 0xFFFFFFFF81B9764C),
                                                 (17993.530275, 0x7F2D58B2A813)]


def test_report_formats_and_serializes():
    prof = {"run": {"standard": "LPDDR5-6400", "pattern": "random", "requests": 1000,
                    "channels": 1, "runs": 3, "cpu_s": 1.5, "mreq_per_cpu_s": 0.002},
            "engine_files": [ENGINE], "section": ".ltext", "attribution": _attribute()}
    text = ep.format_report(prof)
    assert "engine 82.6%, outside 17.4%" in text
    assert "_loop: loop setup" in text and "s = helper(s)" in text
    json.dumps(prof)


def test_missing_tool_is_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr(ep.shutil, "which", lambda name: None)
    assert ep.main(["--standard", "lpddr5-6400", "--pattern", "random"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "engine_profile: perf not found on PATH (install linux-perf)"


def test_relocations_and_link_check():
    relocs = ep.parse_relocations(
        "\nengine.o:     file format elf64-x86-64\n\nRELOCATION RECORDS FOR [.ltext]:\n"
        "OFFSET           TYPE              VALUE\n"
        "0000000000001325 R_X86_64_64       .rodata.cst8\n"
        "0000000000002a67 R_X86_64_64       _ZN_loop\n"
        "0000000000003000 R_X86_64_64       .ltext+0x0000000000000010\n"
        "0000000000003100 R_X86_64_PC32     _ZN_loop-0x0000000000000004\n"
        "0000000000003200 R_X86_64_64       NRT_incref\n")
    assert relocs == [(0x1325, "R_X86_64_64", ".rodata.cst8", 0),
                      (0x2A67, "R_X86_64_64", "_ZN_loop", 0),
                      (0x3000, "R_X86_64_64", ".ltext", 0x10),
                      (0x3100, "R_X86_64_PC32", "_ZN_loop", -4),
                      (0x3200, "R_X86_64_64", "NRT_incref", 0)]
    symbols = {".ltext": (".ltext", 0, 0), "_ZN_loop": (".ltext", 0xBF40, 0x100),
               "NRT_incref": (".ltext", 0x15C10, 0xA), ".rodata.cst8": (".rodata.cst8", 0, 0)}
    base = 0x7F0000000000
    good = {0x1325: 0x1234, 0x2A67: base + 0xBF40, 0x3000: base + 0x10,
            0x3200: base + 0x15C10}
    assert ep.misresolved(relocs, symbols, ".ltext", base, good) == {}
    # _loop and NRT_incref linked to other copies (as _loop in the compiling process)
    bad = {**good, 0x2A67: 0x7F1000000000 + 0xBF40, 0x3200: 0x7F2000000000}
    assert ep.misresolved(relocs, symbols, ".ltext", base, bad) == {
        "NRT_incref": 0x7F2000000000, "_ZN_loop": 0x7F1000000000 + 0xBF40}
    assert ep.misresolved(relocs, symbols, ".ltext", base + 8, good) == {
        ".ltext": base, "NRT_incref": base + 0x15C10, "_ZN_loop": base + 0xBF40}
    assert ep.code_regions(base, 0x15C38, symbols, {"NRT_incref": 0x7F2000000000}) == [
        (base, 0x15C38, 0), (0x7F2000000000, 0xA, 0x15C10)]


def test_short_name():
    assert ep.short_name("_ZN11dram_models6engine5_loopB3v27B54c8tJTCE5ArrayIxLi1E") == \
        "dram_models.engine._loop"
    assert ep.short_name("NRT_incref") == "NRT_incref"
    assert ep.short_name("_ZN5numba7cpython8builtins6ol_max12_3clocals_3e4implB3v14B58c8E") \
        == "numba.cpython.builtins.ol_max.<locals>.impl"
