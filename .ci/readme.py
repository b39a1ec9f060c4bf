"""Run the README's commands as a new user would: a fresh virtual environment, the plain install, every command.

The set-up command (``pip install torch==2.13.0 -e . && distmc run example ...``, no extras) runs in a new virtual
environment ``.venv-readme``; then every other command in the README's code blocks and its example table runs
with that environment's ``distmc`` and ``python``, from the repository root. A command passes when it exits 0 and,
where the README shows a result, prints it (the example table's values, to the digits shown; the set-up command's
and the Python example's printed values). Commands that are not run say why (the test command is CI's own; the
retraining and the paper's experiment take hours; the Gymnasium example needs the ``rl`` extra). The last line is
``README commands: N ok, M failed``; the exit code is 1 if any failed.

Usage (from the repository root; CI calls it from ``.ci/run``)::

    python3 .ci/readme.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-readme"

#: Commands the README shows that are not run here, and why (matched by their start).
NOT_RUN = {
    'pip install torch==2.13.0 -e ".[test]"': "the test command: CI runs it itself, after this script",
    "pip install torch==2.13.0 -e \".[dev]\"": "the developers' install (ruff, mypy); not a user's command",
    "nice -n 10 python benchmarks/train.py": "retrains every shipped policy (hours on this machine)",
    "python benchmarks/paper.py": "the paper's whole experiment (tens of minutes); tests/test_benchmarks.py checks it",
    "from sb3_contrib import MaskablePPO": "needs the rl extra, which the plain install leaves out; tests/test_gym.py",
    "distmc abstract cartpole-mosaic --policy benchmarks/policies/cartpole.json --horizon 7 --fault sticky:0.2 "
    "--refine 50": "MOSAIC's cart-pole experiment (15 minutes); the shorter cartpole-mosaic command runs instead",
}


def blocks(text: str) -> list[tuple[str, str]]:
    """The README's fenced code blocks: (language, content)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


def commands(text: str) -> list[tuple[str, str | None]]:
    """(command, the output it must print or None) for every shell command and Python example of the README."""
    out: list[tuple[str, str | None]] = []
    for lang, body in blocks(text):
        if lang == "python":
            want = re.search(r"#\s*(\S.*)$", body.strip().splitlines()[-1])
            out.append((body, want.group(1).strip() if want and "verify" in body else None))
            continue
        joined = re.sub(r"\\\n\s*", "", body)
        for line in joined.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if re.search(r"\[--|\bMODEL\b|\.\.\.", line):
                continue  # a usage synopsis, not a command
            if line.startswith(("pip ", "distmc ", "python ", "nice ")):
                out.append((line, None))
    for row in re.findall(r"^\| `(distmc run [^`]+)` \| ([^|]+) \|", text, re.M):
        out.append((row[0], row[1].strip()))
    return out


def expected_values(shown: str) -> list[str]:
    """The numbers a table cell shows (``0.0102 (1,296 states)`` -> ``['0.0102', '1296']``)."""
    return [n.replace(",", "") for n in re.findall(r"\d[\d,]*\.?\d*", shown)]


def agrees(output: str, shown: str) -> bool:
    """Whether ``output`` holds the values ``shown`` (each printed number rounded to the digits shown)."""
    printed = [float(x) for x in re.findall(r"\d+\.\d+(?:e-?\d+)?|\d+", output.replace(",", ""))]
    for value in expected_values(shown):
        digits = len(value.split(".")[1]) if "." in value else 0
        target = float(value)
        sig = len(value.replace(".", "").lstrip("0")) if "." in value else None
        ok = any(round(p, digits) == target or (sig and float(f"{p:.{sig}g}") == target) for p in printed)
        if not ok:
            return False
    return True


def run(cmd: str, env: dict[str, str], python: bool = False) -> subprocess.CompletedProcess[str]:
    args = [str(VENV / "bin" / "python"), "-c", cmd] if python else ["bash", "-c", cmd]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


def main() -> int:
    text = (REPO / "README.md").read_text()
    before = set(os.listdir(REPO))
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(VENV), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    passed = failed = 0
    try:
        for cmd, want in commands(text):
            skip = next((why for start, why in NOT_RUN.items() if cmd.strip().startswith(start)), None)
            first = cmd.strip().splitlines()[0]
            if skip:
                print(f"not run: {first[:100]}: {skip}")
                continue
            t = time.perf_counter()
            res = run(cmd, env, python="\n" in cmd.strip() or cmd.startswith(("from ", "import ")))
            took = time.perf_counter() - t
            good = res.returncode == 0 and (want is None or agrees(res.stdout, want))
            if cmd.startswith("pip install torch==2.13.0 -e . &&"):
                good = good and "P=? [F \"crash\"]  =  " in res.stdout  # the set-up command's own check
            print(f"{'ok' if good else 'FAILED'} ({took:.0f} s): {first[:110]}" + (f"  [shows {want}]" if want else ""))
            if good:
                passed += 1
            else:
                failed += 1
                print(f"  exit {res.returncode}\n  stdout: {res.stdout[-1500:]}\n  stderr: {res.stderr[-1500:]}")
    finally:
        for name in set(os.listdir(REPO)) - before - {VENV.name}:  # what the commands wrote (report.json, ...)
            p = REPO / name
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    print(f"README commands: {passed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
