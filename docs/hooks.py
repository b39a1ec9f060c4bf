"""MkDocs hooks of distmc's documentation site (registered in ``mkdocs.yml`` under ``hooks:``).

* The CLI reference page, ``cli.md``, is generated at build time from the argument parser itself
  (:func:`distmc.cli._parser`): ``distmc --help`` and every subcommand's ``--help``, so it cannot drift from the code.
* Files outside ``docs/`` that the pages show are added to the site under their repository paths:
  ``benchmarks/RESULTS.md`` with its plots, and ``cluster/README.md``.
* A code block that CI does not run is marked by ``<!-- not run: REASON -->`` on the line before it
  (``.ci/docs.py`` skips it); the page then says so in a note above the block, with the reason.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]

#: Repository files outside docs/ that the site carries, by glob.
EXTRA = ["benchmarks/RESULTS.md", "benchmarks/*.png", "cluster/README.md"]

NOT_RUN = re.compile(r"^<!-- not run: (.+?) -->$", re.M)


def _help(parser: argparse.ArgumentParser) -> str:
    os.environ["COLUMNS"] = "100"  # the same line width on every machine
    return parser.format_help()


def cli_reference() -> str:
    """The CLI reference page: the top-level help and each subcommand's, from the parser."""
    from distmc.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [
        "# CLI reference",
        "",
        "Generated from `distmc`'s argument parser when the site is built (`docs/hooks.py`), so it is the help "
        "each command prints. What the options of `distmc run` mean in more words: [Options](options.md).",
        "",
        "## distmc",
        "",
        "```text",
        _help(parser).rstrip(),
        "```",
    ]
    for name, child in sub.choices.items():
        out += ["", f"## distmc {name}", "", "```text", _help(child).rstrip(), "```"]
    return "\n".join(out) + "\n"


def on_files(files: Files, config: dict) -> Files:
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    for pattern in EXTRA:
        for path in sorted(REPO.glob(pattern)):
            rel = path.relative_to(REPO).as_posix()
            files.append(File(rel, str(REPO), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: dict, files: Files) -> str:
    # A repository file outside docs/: its links into docs/ point at the site's root.
    if page.file.src_uri.startswith(("benchmarks/", "cluster/")):
        markdown = markdown.replace("](../docs/", "](../")
    return NOT_RUN.sub(lambda m: f'!!! note "Not run by CI"\n    {m.group(1)}\n', markdown)
