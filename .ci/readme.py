"""Run the README's commands as a new user would: a fresh virtual environment, the plain install, every command.

The set-up command (``pip install torch==2.13.0 -e . && distmc run example ...``, no extras) runs in a new virtual
environment ``.venv-readme``; then every other command in the README's code blocks and its example table runs
with that environment's ``distmc`` and ``python``, from the repository root. A command passes when it exits 0 and
prints every value the README shows for it:

* an example table's cell (``0.0102 (1,296 states)``): each number, to the digits shown;
* an output block (an unlabelled code block right after a command's block, such as the set-up command's "It
  prints"): every line, in order, each matched by a line of the output with the same words and each number equal
  to the one shown, rounded to the digits shown; ``...`` stands for anything (times, paths), and a number followed
  by ``...`` is shown truncated (the printed one lies within one unit of its last digit);
* a Python example: the comment on each ``print(...)`` line, and the comment lines right after a loop that prints,
  are the lines it prints (matched as an output block's).

Commands that are not run say why (the test command is CI's own; the retraining and the paper's experiment take
hours; the Gymnasium example needs the ``rl`` extra). The last line is ``README commands: N ok, M failed``; the
exit code is 1 if any failed.

Usage (from the repository root; CI calls it from ``.ci/run``)::

    python3 .ci/readme.py          # a fresh .venv-readme, the plain install, every command
    python3 .ci/readme.py --here   # this environment's distmc and python (no install): a quick check while editing
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-readme"

#: Commands the README shows that are not run here, and why (matched by their start).
NOT_RUN = {
    'pip install torch==2.13.0 -e ".[test]"': "the test command: CI runs it itself, after this script",
    'pip install torch==2.13.0 -e ".[dev]"': "the developers' install (ruff, mypy); not a user's command",
    "nice -n 10 python benchmarks/train.py": "retrains every shipped policy (hours on this machine)",
    "python benchmarks/paper.py": "the paper's whole experiment (tens of minutes); tests/test_benchmarks.py checks it",
    "from sb3_contrib import MaskablePPO": "needs the rl extra, which the plain install leaves out; tests/test_gym.py",
    "distmc abstract cartpole-mosaic --policy benchmarks/policies/cartpole.json --horizon 7 --fault sticky:0.2 "
    "--refine 50": "MOSAIC's cart-pole experiment (15 minutes); the shorter cartpole-mosaic command runs instead",
}


def blocks(text: str) -> list[tuple[str, str]]:
    """The README's fenced code blocks: (language, content)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


COMMAND_START = ("pip ", "distmc ", "python ", "nice ")


@dataclass
class Check:
    """One command and what it must print.

    Output lines (an output block, a Python example's comments), or the values of an example table's cell.
    """

    cmd: str
    lines: list[str] | None = None
    cell: str | None = None


def shell_commands(body: str) -> list[str]:
    """The commands of a shell block (continuation lines joined, comments and usage synopses left out)."""
    out = []
    for line in re.sub(r"\\\n\s*", "", body).splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if re.search(r"\[--|\bMODEL\b|\.\.\.", line):
            continue  # a usage synopsis, not a command
        if line.startswith(COMMAND_START):
            out.append(line)
    return out


def printed_lines(body: str) -> list[str]:
    """What a Python example says it prints.

    The comment of each ``print(...)`` line, and the comment lines at the start of a line right after a loop whose
    body prints.
    """
    out: list[str] = []
    after_print = False
    for line in body.splitlines():
        m = re.match(r"^(\s*)print\(.*\)\s+#\s?(.*)$", line)
        if m:
            out.append(m.group(2))
            after_print = False  # its output is this comment
        elif line.startswith("#") and after_print:
            out.append(line[1:].strip())
        elif line.strip() and not line.startswith("#"):
            after_print = re.match(r"^\s+print\(", line) is not None
    return out


def commands(text: str) -> list[Check]:
    """Every shell command and Python example of the README, with what it must print."""
    out: list[Check] = []
    last_shell: Check | None = None
    for lang, body in blocks(text):
        if lang == "python":
            out.append(Check(body, printed_lines(body) or None))
            last_shell = None
            continue
        if lang:
            last_shell = None
            continue
        cmds = shell_commands(body)
        first = body.strip().splitlines()[0] if body.strip() else ""
        if not cmds and last_shell is not None and not first.startswith(COMMAND_START):
            last_shell.lines = [line for line in body.splitlines() if line.strip()]  # its output block
            last_shell = None
            continue
        out.extend(Check(c) for c in cmds)
        last_shell = out[-1] if cmds else None
    for row in re.findall(r"^\| `(distmc run [^`]+)` \| ([^|]+) \|", text, re.M):
        out.append(Check(row[0], cell=row[1].strip()))
    return out


def expected_values(shown: str) -> list[str]:
    """The numbers a table cell shows (``0.0102 (1,296 states)`` -> ``['0.0102', '1296']``)."""
    return [n.replace(",", "") for n in re.findall(r"\d[\d,]*\.?\d*", shown)]


def shown_as(printed: float, value: str, truncated: bool = False) -> bool:
    """Whether ``printed`` is the number ``value`` shows.

    Rounded to its digits (to its significant digits for a small number), or, ``truncated``, within one unit of
    its last digit.
    """
    mantissa = value.lower().split("e")[0]
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    target = float(value)
    if "e" in value.lower():
        sig = len(mantissa.replace(".", "").replace("-", "").lstrip("0"))
        return float(f"{printed:.{max(sig - 1, 0)}e}") == target
    if truncated:
        return abs(printed - target) < 10.0**-digits
    sig = len(mantissa.replace(".", "").replace("-", "").lstrip("0")) if "." in mantissa else None
    return round(printed, digits) == target or bool(sig and float(f"{printed:.{sig}g}") == target)


def agrees(output: str, shown: str) -> bool:
    """Whether ``output`` holds the values ``shown`` (each printed number rounded to the digits shown)."""
    printed = [float(x) for x in re.findall(r"\d+\.\d+(?:e-?\d+)?|\d+", output.replace(",", ""))]
    return all(any(shown_as(p, value) for p in printed) for value in expected_values(shown))


NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def line_matcher(shown: str) -> tuple[re.Pattern[str], list[tuple[str, bool]]]:
    """A pattern for a shown output line, and the numbers it shows.

    In the pattern ``...`` is anything, whitespace any whitespace, a number a number; each number comes with
    whether ``...`` follows it (shown truncated).
    """
    parts, numbers = [], []
    tokens = re.split(rf"(\.\.\.|{NUMBER}|\s+)", shown.strip())
    for i, tok in enumerate(tokens):
        if not tok:
            continue
        if tok == "...":
            parts.append(".*?")
        elif tok.isspace():
            parts.append(r"\s+")
        elif re.fullmatch(NUMBER, tok) and (i == 0 or not re.search(r"[A-Za-z_]$", "".join(tokens[:i]))):
            parts.append(f"({NUMBER})")
            numbers.append((tok, i + 1 < len(tokens) and "".join(tokens[i + 1 : i + 3]).startswith("...")))
        else:
            parts.append(re.escape(tok))
    return re.compile("".join(parts)), numbers


def missing_line(output: str, lines: list[str]) -> str | None:
    """The first shown line that ``output`` does not print (in order, numbers as :func:`shown_as` says), or None."""
    printed = [line.strip() for line in output.splitlines()]
    at = 0
    for shown in lines:
        pattern, numbers = line_matcher(shown)
        for j in range(at, len(printed)):
            m = pattern.fullmatch(printed[j])
            if m and all(
                shown_as(float(got), value, cut) for got, (value, cut) in zip(m.groups(), numbers, strict=True)
            ):
                at = j + 1
                break
        else:
            return shown
    return None


def run(cmd: str, env: dict[str, str], python: bool = False, here: bool = False) -> subprocess.CompletedProcess[str]:
    args = [sys.executable if here else str(VENV / "bin" / "python"), "-c", cmd] if python else ["bash", "-c", cmd]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


def main() -> int:
    here = "--here" in sys.argv[1:]
    text = (REPO / "README.md").read_text()
    before = set(os.listdir(REPO))
    if here:  # this environment: its distmc and python, and the set-up command without its install
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    else:
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        env = {
            **os.environ,
            "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(VENV),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        env.pop("PYTHONPATH", None)
    passed = failed = 0
    try:
        for check in commands(text):
            cmd = check.cmd
            skip = next((why for start, why in NOT_RUN.items() if cmd.strip().startswith(start)), None)
            first = cmd.strip().splitlines()[0]
            if skip:
                print(f"not run: {first[:100]}: {skip}")
                continue
            if here and cmd.startswith("pip install torch==2.13.0 -e . &&"):
                cmd = cmd.split("&&", 1)[1].strip()
            t = time.perf_counter()
            python = "\n" in cmd.strip() or cmd.startswith(("from ", "import "))
            res = run(cmd, env, python=python, here=here)
            took = time.perf_counter() - t
            missing = None
            if check.lines is not None:
                missing = missing_line(res.stdout, check.lines)
            good = res.returncode == 0 and missing is None and (check.cell is None or agrees(res.stdout, check.cell))
            shows = (
                f"  [shows {check.cell}]"
                if check.cell
                else (f"  [{len(check.lines)} lines shown]" if check.lines else "")
            )
            print(f"{'ok' if good else 'FAILED'} ({took:.0f} s): {first[:110]}{shows}")
            if good:
                passed += 1
            else:
                failed += 1
                if missing is not None:
                    print(f"  the README shows a line it does not print: {missing}")
                print(f"  exit {res.returncode}\n  stdout: {res.stdout[-1500:]}\n  stderr: {res.stderr[-1500:]}")
    finally:
        for name in set(os.listdir(REPO)) - before - {VENV.name}:  # what the commands wrote (report.json, ...)
            p = REPO / name
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    print(f"README commands: {passed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
