"""Who may do what in hived: the one definition, read from the spec.

The REST authorizer (``hived.jupyter_ext.auth.decide``) and the service's own
checks (submit, cancel, exchange, garbage collection) both ask :class:`Access`,
so a door cannot answer differently from the service behind it.

The decisions:

- cluster admin: in the spec's ``admins``, in a Hub group of ``adminGroups``,
  or the account running the server (:data:`SERVER_ACCOUNT` among the groups);
- VC admin: a cluster admin, or in the VC's ``admins`` / ``adminGroups``;
- VC member: a VC admin, or in the VC's ``users`` / ``groups``; a VC that
  names nobody has no members but its admins;
- a job: its owner and the VC's members see it; its owner and the VC's admins
  change it (cancel).

``groups`` arguments are the groups the identity provider reports for the
caller (JupyterHub's groups; none without a Hub). They are looked up on every
check, so a change on the Hub applies as soon as the provider sees it.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any


class _ServerAccount:
    """The account running the server. Not a string, so that no Hub group can be
    named like it: only the REST layer, which knows the server's own token, adds it."""

    def __repr__(self) -> str:
        return "SERVER_ACCOUNT"


SERVER_ACCOUNT = _ServerAccount()


@dataclass(frozen=True)
class Access:
    """The membership lists of one spec, in the shape the checks need."""

    vc_users: dict[str, frozenset[str]] = field(default_factory=dict)
    vc_admins: dict[str, frozenset[str]] = field(default_factory=dict)
    admins: frozenset[str] = frozenset()
    vc_groups: dict[str, frozenset[str]] = field(default_factory=dict)
    vc_admin_groups: dict[str, frozenset[str]] = field(default_factory=dict)
    admin_groups: frozenset[str] = frozenset()

    @classmethod
    def from_spec(cls, spec: Any) -> Access:
        vcs = spec.vcs
        return cls(
            vc_users={n: frozenset(v.users or ()) for n, v in vcs.items()},
            vc_admins={n: frozenset(v.admins or ()) for n, v in vcs.items()},
            admins=frozenset(spec.admins or ()),
            vc_groups={n: frozenset(getattr(v, "groups", None) or ()) for n, v in vcs.items()},
            vc_admin_groups={n: frozenset(getattr(v, "admin_groups", None) or ()) for n, v in vcs.items()},
            admin_groups=frozenset(getattr(spec, "admin_groups", None) or ()),
        )

    def is_admin(self, user: str, groups: Iterable[Hashable] = ()) -> bool:
        """A cluster admin."""
        groups = frozenset(groups)
        return user in self.admins or SERVER_ACCOUNT in groups or not self.admin_groups.isdisjoint(groups)

    def is_vc_admin(self, user: str, vc: str, groups: Iterable[Hashable] = ()) -> bool:
        groups = frozenset(groups)
        return (self.is_admin(user, groups) or user in self.vc_admins.get(vc, ())
                or not self.vc_admin_groups.get(vc, frozenset()).isdisjoint(groups))

    def is_member(self, user: str, vc: str, groups: Iterable[Hashable] = ()) -> bool:
        groups = frozenset(groups)
        return (self.is_vc_admin(user, vc, groups) or user in self.vc_users.get(vc, ())
                or not self.vc_groups.get(vc, frozenset()).isdisjoint(groups))

    def may_see_job(self, user: str, vc: str, owner: str, groups: Iterable[Hashable] = ()) -> bool:
        return user == owner or self.is_member(user, vc, groups)

    def may_change_job(self, user: str, vc: str, owner: str, groups: Iterable[Hashable] = ()) -> bool:
        """Cancel it: its owner, the VC's admins, cluster admins."""
        return user == owner or self.is_vc_admin(user, vc, groups)

    def known(self, user: str, groups: Iterable[Hashable] = ()) -> bool:
        """Named anywhere in the spec (sees the cluster)."""
        groups = frozenset(groups)
        return self.is_admin(user, groups) or any(self.is_member(user, vc, groups) for vc in self.vc_users)

    def vcs_of(self, user: str, groups: Iterable[Hashable] = ()) -> list[str]:
        """The VCs this user sees (all of them for cluster admins)."""
        groups = frozenset(groups)
        return [vc for vc in self.vc_users if self.is_member(user, vc, groups)]

    def members_text(self, vc: str) -> str:
        """Who the members of ``vc`` are, for a refusal."""
        names = sorted(self.vc_users.get(vc, frozenset()) | self.vc_admins.get(vc, frozenset()))
        names += [f"group {g}" for g in sorted(self.vc_groups.get(vc, frozenset())
                                                | self.vc_admin_groups.get(vc, frozenset()))]
        return ", ".join(names) or "none but the cluster admins"

    def vcs_text(self, user: str, groups: Iterable[Hashable] = ()) -> str:
        """The VCs ``user`` sees, for a refusal: never a VC the caller is not in."""
        return ", ".join(sorted(self.vcs_of(user, groups))) or "none"

    def admins_for(self, user: str, vc: str, groups: Iterable[Hashable] = ()) -> str:
        """`` (VC admins only: ...)`` naming the admins to ask, for a refusal; the names are told
        only to members of ``vc`` (another team's admins are not an outsider's to know)."""
        if self.is_member(user, vc, groups):
            return f" (VC admins only: {self.admins_text(vc)})"
        return " (VC admins only)"

    def admins_text(self, vc: str) -> str:
        """Who the admins of ``vc`` are, for a refusal."""
        names = sorted(self.vc_admins.get(vc, frozenset()) | self.admins)
        names += [f"group {g}" for g in sorted(self.vc_admin_groups.get(vc, frozenset()) | self.admin_groups)]
        return ", ".join(names) or "none"
