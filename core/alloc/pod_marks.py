"""Pods marked on physical cells, and the counters that follow from them.

A pod sits on exactly one cell (``guaranteed_owner`` / ``opportunistic_owner``);
a downgraded job whose victim sits on exactly the same cell waits there
(``waiting_owner``) until the victim leaves, and then takes the cell.
Every ancestor counts the GPUs under pods of each kind, and ``clean_level``
(the highest level of a sub-cell with no pod and no bad GPU) lets the
opportunistic walk skip subtrees that cannot hold a pod.
"""
from __future__ import annotations

from ..cells import Cell
from .buddy import rekey_around


def set_pod(c: Cell, owner: str | None, opportunistic: bool) -> None:
    """Put ``owner``'s pod on ``c`` (None: take it off) and update the counters above."""
    delta = c.gpus if owner is not None else -c.gpus
    x: Cell | None = c
    if opportunistic:
        c.opportunistic_owner = owner
        while x is not None:
            x.opportunistic_gpus += delta
            x = x.parent
    else:
        c.guaranteed_owner = owner
        while x is not None:
            x.guaranteed_gpus += delta
            x = x.parent
    update_clean_level(c)
    if opportunistic:
        rekey_around(c)


def set_waiting(c: Cell, owner: str | None) -> None:
    """Count ``owner``'s pod on ``c`` (None: stop) while the victim it waits for holds exactly ``c``."""
    delta = c.gpus if owner is not None else -c.gpus
    c.waiting_owner = owner
    x: Cell | None = c
    while x is not None:
        x.opportunistic_gpus += delta
        x = x.parent
    update_clean_level(c)
    rekey_around(c)


def mark_opportunistic(c: Cell, owner: str) -> None:
    """Put an opportunistic pod on ``c``; it waits when the cell itself is held by a victim it waits for."""
    if c.opportunistic_owner is not None:
        set_waiting(c, owner)
    else:
        set_pod(c, owner, True)


def unmark_opportunistic(c: Cell, owner: str) -> None:
    """Take ``owner``'s opportunistic pod off ``c``; a pod waiting for it there takes the cell."""
    if c.waiting_owner == owner:
        set_waiting(c, None)
        return
    set_pod(c, None, True)
    waiting = c.waiting_owner
    if waiting is not None:
        set_waiting(c, None)
        set_pod(c, waiting, True)


def clean_level(c: Cell) -> int:
    """What ``c.clean_level`` should be, from the cell and its children's counts."""
    if c.guaranteed_owner is not None or c.opportunistic_owner is not None or c.waiting_owner is not None:
        return 0
    if c.level == 1:
        return 0 if c.bad_gpus else 1
    cnt = c.clean_children
    if cnt[c.level - 1] == len(c.children):
        return c.level
    for lvl in range(c.level - 1, 0, -1):  # else: the best child's clean level
        if cnt[lvl]:
            return lvl
    return 0


def update_clean_level(c: Cell) -> None:
    new = clean_level(c)
    while new != c.clean_level:
        old, c.clean_level = c.clean_level, new
        p = c.parent
        if p is None:
            return
        p.clean_children[old] -= 1
        p.clean_children[new] += 1
        c, new = p, clean_level(p)


def victims_under(c: Cell) -> set[str]:
    """Owners of opportunistic pods (waiting ones included) on any GPU of ``c`` (what a guaranteed pod preempts)."""
    out: set[str] = set()
    for a in [c, *c.ancestors()]:
        if a.opportunistic_owner is not None:
            out.add(a.opportunistic_owner)
            if a.waiting_owner is not None:
                out.add(a.waiting_owner)
    if c.opportunistic_gpus:
        stack = list(c.children)
        while stack:
            x = stack.pop()
            if x.opportunistic_gpus:
                if x.opportunistic_owner is not None:
                    out.add(x.opportunistic_owner)
                    if x.waiting_owner is not None:
                        out.add(x.waiting_owner)
                stack.extend(x.children)
    return out


def guaranteed_over(c: Cell) -> set[str]:
    """Owners of guaranteed pods on any GPU of ``c``."""
    out = {a.guaranteed_owner for a in [c, *c.ancestors()] if a.guaranteed_owner is not None}
    stack = [x for x in c.children if x.guaranteed_gpus]
    while stack:
        x = stack.pop()
        if x.guaranteed_owner is not None:
            out.add(x.guaranteed_owner)
        else:
            stack.extend(y for y in x.children if y.guaranteed_gpus)
    return out


def covered(c: Cell) -> bool:
    """Is a pod on ``c`` or on a cell above it?"""
    x: Cell | None = c
    while x is not None:
        if x.guaranteed_owner is not None or x.opportunistic_owner is not None:
            return True
        x = x.parent
    return False


def free_under(c: Cell) -> int:
    """GPUs below ``c`` with no pod (pods above ``c`` are the caller's business)."""
    if c.guaranteed_owner is not None or c.opportunistic_owner is not None:
        return 0
    if c.guaranteed_gpus == 0 and c.opportunistic_gpus == 0:
        return c.gpus
    return sum(free_under(k) for k in c.children)
