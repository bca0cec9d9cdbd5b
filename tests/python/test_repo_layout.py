"""The project's entry points stay findable: `make help` lists every Makefile target, scripts/
is grouped by purpose (no loose files), and every `scripts/...` path the repository mentions
(Makefile, CI, tests, docs, comments) exists, so moving a script cannot leave a stale reference.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def makefile_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    # `name:` or `name: deps` at the start of a line; not `VAR := ...`, `VAR ?= ...`, nor the
    # stamp rule whose name is a variable.
    names = re.findall(r"^([a-z][a-z0-9_-]*)\s*:(?!=)", text, re.M)
    return sorted(set(names))


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_help_lists_every_target():
    targets = makefile_targets()
    assert {"demo", "test", "help", "build", "bench"} <= set(targets), targets
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = set(re.findall(r"make ([a-z][a-z0-9_-]*)", out))
    missing = [t for t in targets if t not in listed]
    assert not missing, f"`make help` omits {missing}:\n{out}"
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert phony and set(targets) <= set(phony.group(1).split()), f".PHONY misses {set(targets) - set(phony.group(1).split())}"


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / line for line in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "target", "node_modules", ".terraform"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def test_scripts_are_grouped_by_purpose():
    loose = [p.name for p in (ROOT / "scripts").iterdir() if p.is_file()]
    assert not loose, f"scripts/ holds only folders by purpose (setup, build, bench, profile, cost, local, check): {loose}"


def test_every_scripts_path_mentioned_exists():
    stale = []
    for path in tracked_files():
        if not path.is_file() or path.suffix in {".parquet", ".avro", ".png", ".zip"}:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for m in re.finditer(r"(?<![\w/.-])scripts/[\w./-]*[\w]", text):
            if not (ROOT / m.group(0)).exists():
                stale.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not stale, "paths under scripts/ that do not exist:\n" + "\n".join(sorted(set(stale)))


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_link_of_the_docs_resolves():
    """Relative links of README.md, ARCHITECTURE.md and docs/ name a file (and heading) that exists."""
    pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif fragment and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", dest.read_text(), flags=re.S), re.M)
                if fragment not in {anchor(h) for h in headings}:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
