"""tools/assemble_docs.py joins docs/validation/ and docs/performance/ into one page each.

Checks that every relative link in docs/ resolves (file and #heading), that the pages it
writes include every page of both folders and that their rewritten links resolve too,
and that the link check itself catches a broken link.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "assemble_docs.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("assemble_docs", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs-build")
    p = subprocess.run([sys.executable, str(TOOL), str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_every_relative_link_in_docs_resolves(tool):
    files = sorted((ROOT / "docs").rglob("*.md"))
    assert len(files) > 20
    assert tool.broken_links(files) == []


def test_readme_links_resolve(tool):
    assert tool.broken_links([ROOT / "README.md"]) == []


def test_no_assembled_page_is_committed_in_docs():
    assert not (ROOT / "docs" / "validation.md").exists()
    assert not (ROOT / "docs" / "performance.md").exists()


@pytest.mark.parametrize("folder", ["validation", "performance"])
def test_assembled_page_holds_every_page_of_its_folder(tool, assembled, folder):
    text = (assembled / f"{folder}.md").read_text()
    pages = sorted((ROOT / "docs" / folder).glob("*.md"))
    assert pages and [p.stem for p in tool.pages(folder)][0] == "README"
    for page in pages:
        title = tool.headings(page.read_text())[0][1]
        assert f"\n## {title}\n" in text, f"{page.name} is missing from {folder}.md"
        assert f"(#{tool.slug(title)}" in text, f"{page.name} has no contents entry"
    # every heading of every page is there, one level lower
    assert len(tool.headings(text)) == 1 + sum(len(tool.headings(p.read_text()))
                                               for p in pages)


def test_links_of_the_assembled_pages_resolve(tool, assembled):
    written = sorted(assembled.glob("*.md"))
    assert [p.name for p in written] == ["performance.md", "validation.md"]
    assert tool.broken_links(written) == []
    # a link to an image or data file now points back into docs/
    assert "docs/validation/npu/roofline/roofline.png" in (assembled / "validation.md").read_text()


def test_the_link_check_catches_broken_links(tool, tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Part one\n\ntext\n")
    (tmp_path / "b.md").write_text(
        "# B\n\n[ok](a.md) [ok](a.md#part-one) [ok](#b) [web](https://example.org/x.md)\n"
        "`[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n"
        "[gone](missing.md) [bad anchor](a.md#part-two) ![img](img/x.png)\n")
    bad = tool.broken_links([tmp_path / "b.md"])
    assert len(bad) == 3, bad
    assert any("missing.md" in b for b in bad)
    assert any("#part-two" in b for b in bad)
    assert any("img/x.png" in b for b in bad)
