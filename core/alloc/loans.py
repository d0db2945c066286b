"""Cell exchange between VCs: unbound preassigned cells move from a lender to a borrower.

The chain's total reservation r_k does not change, so invariant (2) and with
it every VC's sharing safety still hold. Loans are kept per pair: cells going
back to the VC they came from pay that loan off first (netting per VC alone
let A -> B -> C read as C lending -1).
"""
from __future__ import annotations

from ..spec import ClusterSpec
from .virtual_cluster import LevelKey, VirtualCluster

LoanKey = tuple[str, str, LevelKey]   # (lender, borrower, (chain, level))


class LoanBook:
    def __init__(self, spec: ClusterSpec, vcs: dict[str, VirtualCluster]):
        self.spec = spec
        self.vcs = vcs
        self.pairs: dict[LoanKey, int] = {}   # cells lent now, per lender, borrower and level

    def transfer(self, lender_vc: str, borrower_vc: str, chain: str, level: int, count: int) -> None:
        """Move ``count`` unbound level-``level`` cells of ``chain`` from lender to borrower."""
        for name in (lender_vc, borrower_vc):
            if name not in self.vcs:
                raise ValueError(f"unknown VC {name!r}")
        if lender_vc == borrower_vc:
            raise ValueError("lender and borrower are the same VC")
        if chain not in self.spec.chains:
            raise ValueError(f"unknown chain {chain!r}")
        ch = self.spec.chains[chain]
        if not 1 <= level <= ch.top_level:
            raise ValueError(f"level {level} is not a level of chain {chain} (1..{ch.top_level})")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        lender, borrower = self.vcs[lender_vc], self.vcs[borrower_vc]
        key = (chain, level)
        free = lender.unbound(chain, level)
        if free < count:
            have = lender.quota.get(key, 0)
            raise ValueError(f"unsafe transfer: VC {lender_vc} holds {have} {chain}.{ch.levels[level - 1]} cells, "
                             f"{have - free} of them in use, so it cannot lend {count}")
        lender.quota[key] = lender.quota.get(key, 0) - count
        borrower.quota[key] = borrower.quota.get(key, 0) + count
        pairs = self.pairs
        back = min(count, pairs.get((borrower_vc, lender_vc, key), 0))
        rest = count - back
        for pair, delta in (((borrower_vc, lender_vc, key), -back), ((lender_vc, borrower_vc, key), rest)):
            n = pairs.get(pair, 0) + delta
            if n:
                pairs[pair] = n
            else:
                pairs.pop(pair, None)
        for vc in (lender, borrower):
            for book, side in ((vc.lent, 0), (vc.borrowed, 1)):
                n = sum(m for pair, m in pairs.items() if pair[side] == vc.name and pair[2] == key)
                if n:
                    book[key] = n
                else:
                    book.pop(key, None)
