"""Storm's C++ log output while it parses, caught (:func:`storm_quiet`) instead of printed.

Storm's logger writes straight to file descriptor 1, its errors and warnings too. A parse error is then reported
once, as distmc's one-line error (:func:`storm_lines` splits Storm's message), instead of also as Storm's
multi-line log; what Storm wrote goes to the ``distmc.storm`` logger (``--log-level debug``), nothing is dropped.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TextIO

__all__ = ["storm_lines", "storm_quiet"]

log = logging.getLogger("distmc.storm")


def storm_lines(text: str) -> list[str]:
    """The non-empty lines of a Storm exception's text, stripped, without its exception-class prefix."""
    return [ln.strip() for ln in text.replace("WrongFormatException: ", "").splitlines() if ln.strip()]


@contextmanager
def _redirect(fd: int, stream: TextIO, sink: list[str] | None = None) -> Iterator[None]:
    try:
        stream.flush()  # sys.stdout may be None (pythonw) or closed: AttributeError, ValueError
    except (AttributeError, OSError, ValueError):
        pass
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor (an embedding host): leave it alone
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace").strip()
            if text:
                log.debug("storm: %s", text)
                if sink is not None:
                    sink.append(text)


@contextmanager
def storm_quiet(sink: list[str] | None = None) -> Iterator[None]:
    """Redirect file descriptors 1 and 2 to temporary files for the block; log what was written there.

    ``sink``: also append the text written (after the block), for a caller that reads Storm's warnings.
    """
    with ExitStack() as stack:
        stack.enter_context(_redirect(1, sys.stdout, sink))
        stack.enter_context(_redirect(2, sys.stderr, sink))
        yield
