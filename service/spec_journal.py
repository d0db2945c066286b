"""Which spec a service starts with: the journal keeps the spec in force, and who put it there.

The store's meta ``spec`` holds the text of the spec in force and
``spec_source`` how it got there: ``start`` (a ``--spec`` at start) or
``reload`` (``hived spec reload``, POST spec/reload, SIGHUP, the admin widget).
At start:

- an empty journal, or one whose spec came from a start: the given spec
  applies and is journaled (as before: the command line says what to run);
- a journal whose spec came from a reload and differs from the given one:
  the reloaded spec stays in force, and the log says so loudly, naming the
  file that was not used and the command that would apply it (``hived spec
  reload FILE`` goes through the one reconfiguration, with its checks and
  downgrades). A reload that was never undone is never lost to a restart.
"""
from __future__ import annotations

import logging
from typing import Any

from .store import JournalWriteError

log = logging.getLogger("hived.service")

SOURCE_START, SOURCE_RELOAD = "start", "reload"


def spec_at_start(store: Any, given: str | None, where: str) -> tuple[str | None, str]:
    """(the journaled text to use instead of the given spec, or None; the source in force).

    Raises ``JournalWriteError`` when the given spec cannot be journaled (the caller
    decides whether to start degraded)."""
    journaled = store.get_meta("spec")
    source = store.get_meta("spec_source") or SOURCE_START
    if given is None or journaled == given:
        return None, source if journaled is not None else SOURCE_START
    if journaled is not None and source == SOURCE_RELOAD:
        log.warning("hived: the journal holds a spec reloaded while the service ran; it stays in force and "
                    "%s (which differs) is NOT used. To apply that file: hived spec reload %s", where, where)
        return journaled, SOURCE_RELOAD
    store.set_meta("spec", given)
    store.set_meta("spec_source", SOURCE_START)
    return None, SOURCE_START


__all__ = ["SOURCE_RELOAD", "SOURCE_START", "JournalWriteError", "spec_at_start"]
