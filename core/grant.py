"""What an allocator hands out for one gang, in the form the engine keeps and the store saves."""
from __future__ import annotations

from dataclasses import dataclass, field

from .jobs import Placement


@dataclass
class Grant:
    """The cells (or GPUs) held by ``owner`` in ``vc``; subclasses say how they name what they hold."""

    owner: str
    vc: str
    chain: str
    opportunistic: bool
    priority: int
    pods: list
    victims: set = field(default_factory=set)

    @property
    def placement(self) -> Placement:
        return Placement(self.chain, tuple(self.pods), self.opportunistic)
