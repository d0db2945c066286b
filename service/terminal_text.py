"""Text that users control, made safe to print on a terminal, and tables that fit one.

Job names, commands, reasons and user names come from whoever submitted the
job. Printed raw, an escape sequence could repaint another user's terminal, a
newline could forge a row of ``hived jobs``, and a lone surrogate (valid in
JSON, not encodable as UTF-8) would make printing fail for every reader.
``visible`` shows every such character as a Python-style escape instead.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import Any


def visible(value: Any) -> str:
    """``value`` as text with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\ud800``)."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def terminal_width() -> int | None:
    """Columns to fit tables into: the terminal's (or $COLUMNS); None when printing to a pipe."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if not sys.stdout.isatty():
        return None       # scripts reading a pipe get whole cells (or use --json)
    return shutil.get_terminal_size().columns


def table(rows: list[list], headers: list[str], width: int | None = None,
          shrink: tuple[str, ...] = ()) -> str:
    """Rows under headers, columns two spaces apart, every cell escaped.

    When the table is wider than ``width`` the columns named in ``shrink``
    (free text such as names and placements) are cut, widest first, and end
    in "…" so the reader sees that something was cut."""
    cells = [[visible(h) for h in headers]] + [["-" if c is None else visible(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if width:
        over = sum(widths) + 2 * (len(widths) - 1) - width
        cut = [i for i, h in enumerate(headers) if h in shrink]
        while over > 0 and cut:
            i = max(cut, key=lambda k: widths[k])
            floor = max(len(headers[i]), 6)
            if widths[i] <= floor:
                cut.remove(i)
                continue
            step = min(over, widths[i] - floor)
            widths[i] -= step
            over -= step
        for r in cells:
            for i, w in enumerate(widths):
                if len(r[i]) > w:
                    r[i] = r[i][:w - 1] + "…"
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)
