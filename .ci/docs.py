"""Run the documentation pages' commands, as ``.ci/readme.py`` runs the README's, and compare what they print.

Every page under ``docs/`` (``docs/*.md``, in name order; the tutorial's steps in the order the page gives them):

* a shell block (unlabelled, ``bash``, ``sh`` or ``console``): every command in it (``pip``, ``distmc``, ``python``,
  ``nice``; continuation lines joined, comments and usage synopses left out) runs with ``bash`` from the repository
  root; the block right after it, unlabelled or ``text``, without commands of its own, is its output block;
* a ``python`` block runs with this environment's ``python -c``; the comment on each ``print(...)`` line, and the
  comment lines after a loop that prints, are what it prints;
* an example table's row ``| `distmc run ...` | value |``: the command, its values to the digits shown.

A command passes when it exits 0 and prints what the page shows, matched as ``.ci/readme.py`` matches (each shown
line, in order, by a printed line with the same words and each number equal to the one shown, rounded to the
digits shown; ``...`` stands for anything).

A block CI does not run is marked by the line ``<!-- not run: REASON -->`` right before it; the site renders the
reason as a note on the page (``docs/hooks.py``), so a reader sees it too. The set-up command
``pip install torch==2.13.0 -e . && distmc run ...`` runs without its install (CI installed the package already).

It runs in the environment it is started from (CI: ``.venv-ci``, after the developers' install, which brings the
``rl`` and ``docs`` extras): its ``distmc`` and its ``python``. Files the commands write at the repository root
(``shield-delivery/``, ``*.parquet``, ...) are removed at the end. The last line is ``docs commands: N ok, M failed``;
the exit code is 1 if any failed.

Usage (from the repository root)::

    python .ci/docs.py                       # every page
    python .ci/docs.py docs/tutorial.md      # only these pages
    python .ci/docs.py --list                # what would run, and what each must print
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ci_readme", HERE / "readme.py")
assert _spec is not None and _spec.loader is not None
readme = importlib.util.module_from_spec(_spec)
sys.modules["ci_readme"] = readme
_spec.loader.exec_module(readme)

REPO = readme.REPO
SHELL = {"", "bash", "sh", "console"}
OUTPUT = {"", "text"}
SETUP = "pip install torch==2.13.0 -e . &&"
BLOCK = re.compile(r"^(?:<!-- not run: (?P<why>.+?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```", re.S | re.M)


@dataclass
class DocCheck:
    """A page's command, what it must print (as :class:`readme.Check`), whether it is Python, why it is not run."""

    cmd: str
    lines: list[str] | None = None
    cell: str | None = None
    python: bool = False
    skip: str | None = None


def page_checks(text: str) -> list[DocCheck]:
    """Every command of a page, in order, with what it must print."""
    out: list[DocCheck] = []
    last: DocCheck | None = None
    for m in BLOCK.finditer(text):
        lang, body, why = m.group("lang"), m.group("body"), m.group("why")
        if lang == "python":
            out.append(DocCheck(body, python=True, skip=why, lines=readme.printed_lines(body) or None))
            last = None
            continue
        cmds = readme.shell_commands(body) if lang in SHELL else []
        first = body.strip().splitlines()[0] if body.strip() else ""
        if not cmds and last is not None and lang in OUTPUT and not first.startswith(readme.COMMAND_START):
            last.lines = [line for line in body.splitlines() if line.strip()]
            last = None
            continue
        out.extend(DocCheck(c, skip=why) for c in cmds)
        last = out[-1] if cmds and not why else None  # a command not run has no output to compare
    for cmd, cell in re.findall(r"^\| `(distmc run [^`]+)` \| ([^|]+) \|", text, re.M):
        out.append(DocCheck(cmd, cell=cell.strip()))
    return out


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    pages = [Path(p).resolve() for p in argv if p != "--list"] or sorted((REPO / "docs").glob("*.md"))
    if listing:
        for page in pages:
            for c in page_checks(page.read_text()):
                what = (
                    f"not run ({c.skip})"
                    if c.skip
                    else f"{len(c.lines or [])} lines shown" + (f", {c.cell}" if c.cell else "")
                )
                print(
                    f"{page.name}: {'python' if c.python else 'shell'}: {c.cmd.strip().splitlines()[0][:90]}  [{what}]"
                )
        return 0
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    before = set(os.listdir(REPO))
    passed = failed = 0
    try:
        for page in pages:
            name = page.relative_to(REPO)
            for check in page_checks(page.read_text()):
                first = check.cmd.strip().splitlines()[0]
                if check.skip:
                    print(f"not run: {name}: {first[:100]}: {check.skip}")
                    continue
                cmd = check.cmd.split("&&", 1)[1].strip() if check.cmd.startswith(SETUP) else check.cmd
                t = time.perf_counter()
                res = readme.run(cmd, env, python=check.python, here=True)
                took = time.perf_counter() - t
                missing = readme.missing_line(res.stdout, check.lines) if check.lines is not None else None
                good = (
                    res.returncode == 0
                    and missing is None
                    and (check.cell is None or readme.agrees(res.stdout, check.cell))
                )
                shows = (
                    f"  [shows {check.cell}]"
                    if check.cell
                    else (f"  [{len(check.lines)} lines shown]" if check.lines else "")
                )
                print(f"{'ok' if good else 'FAILED'} ({took:.0f} s): {name}: {first[:100]}{shows}", flush=True)
                if good:
                    passed += 1
                    continue
                failed += 1
                if missing is not None:
                    print(f"  the page shows a line it does not print: {missing}")
                print(f"  exit {res.returncode}\n  stdout: {res.stdout[-1500:]}\n  stderr: {res.stderr[-1500:]}")
    finally:
        for entry in set(os.listdir(REPO)) - before:  # what the commands wrote (shield-delivery/, ...)
            p = REPO / entry
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    print(f"docs commands: {passed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
