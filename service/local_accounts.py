"""Which Unix account a local job runs as.

A hived running as root never runs a job as root unless the operator says so:

1. the spec's account mapping (``ClusterSpec.unix_account(user, vc)``: a name,
   a numeric ``uid`` or ``uid:gid``) decides when it names an account;
2. otherwise ``$HIVED_JOB_ACCOUNT`` decides: ``vc`` (the default) gives each VC
   its own uid from the service's range (``$HIVED_JOB_UIDS``, else a block of
   100,000 from 1900000000 claimed in a host-wide registry: :func:`claim_uids`),
   kept in ``accounts.json`` beside the jobs so a VC keeps its uid across restarts;
   ``refuse`` fails such jobs with the reason; ``server`` runs them as the
   server's own account (root), an explicit opt-in.

A hived not running as root cannot switch accounts: every job runs as the
server's account, and a mapping naming another account is refused.
"""
from __future__ import annotations

import fcntl
import grp
import json
import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODES = ("vc", "server", "refuse")
DEFAULT_UIDS = (1_900_000_000, 1_900_099_999)
BLOCK = DEFAULT_UIDS[1] - DEFAULT_UIDS[0] + 1   # a service's default range: one block of 100,000 uids
BLOCKS = 2000                                     # default blocks: 1900000000 up to 2099999999
REGISTRY = "/var/lib/hived/uid-ranges.json"       # $HIVED_UID_REGISTRY: the host-wide claims


class AccountError(ValueError):
    """A job cannot be given an account; the message says why and what to change."""


@dataclass(frozen=True)
class Account:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    name: str = ""
    home: str | None = None      # None: the job's own directory serves as HOME

    def as_runner(self) -> dict:
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups)}


def resolve(text: str) -> Account:
    """``name``, ``uid`` or ``uid:gid`` -> Account; raises AccountError."""
    text = str(text).strip()
    try:
        if text.replace(":", "").isdigit() and text.count(":") <= 1:
            uid_s, _, gid_s = text.partition(":")
            uid = int(uid_s)
            try:
                pw = pwd.getpwuid(uid)
            except KeyError:
                pw = None
            gid = int(gid_s) if gid_s else (pw.pw_gid if pw else uid)
            if pw is not None:
                return Account(uid, gid, tuple(os.getgrouplist(pw.pw_name, gid)), pw.pw_name, pw.pw_dir)
            return Account(uid, gid, (), str(uid))
        pw = pwd.getpwnam(text)
    except KeyError:
        raise AccountError(f"unix account {text!r}: no such user on this host") from None
    return Account(pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), pw.pw_name, pw.pw_dir)


def spec_account(spec, user: str, vc: str) -> str | None:
    """The spec's mapping for (user, vc), or None (also for specs without mappings)."""
    lookup = getattr(spec, "unix_account", None)
    return lookup(user, vc) if callable(lookup) else None


def uid_range(text: str | None) -> tuple[int, int]:
    if not text:
        return DEFAULT_UIDS
    lo, sep, hi = text.partition("-")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit() or int(lo) > int(hi) or int(lo) == 0:
        raise ValueError(f"$HIVED_JOB_UIDS: must be FIRST-LAST with 0 < FIRST <= LAST, got {text!r}")
    return int(lo), int(hi)


class JobAccounts:
    """Decides the account of each job (see the module docstring)."""

    def __init__(self, state_dir: Path, mapping: Callable[[str, str], str | None] | None = None,
                 mode: str | None = None, uids: tuple[int, int] | None = None, registry=None):
        self.mapping = mapping
        self.mode = mode or os.environ.get("HIVED_JOB_ACCOUNT") or "vc"
        if self.mode not in MODES:
            raise ValueError(f"$HIVED_JOB_ACCOUNT: must be one of {', '.join(MODES)}, got {self.mode!r}")
        explicit = uids or (uid_range(os.environ["HIVED_JOB_UIDS"]) if os.environ.get("HIVED_JOB_UIDS") else None)
        self.uids = explicit or DEFAULT_UIDS
        self.file = Path(state_dir) / "accounts.json"
        self.euid = os.geteuid()
        if self.euid == 0 and self.mode == "vc":   # only then are uids handed out
            self.uids = claim_uids(Path(registry or os.environ.get("HIVED_UID_REGISTRY") or REGISTRY),
                                   Path(state_dir), explicit, self._stored_uids())

    def _stored_uids(self) -> list[int]:
        try:
            return [int(u) for u in json.loads(self.file.read_text()).values()]
        except (OSError, ValueError, AttributeError):
            return []

    def for_job(self, user: str, vc: str, allocate: bool = True) -> Account | None:
        """The account to switch to, or None to run as the server's own account.

        ``allocate=False`` (a check at submission, before the VC is known to
        exist) raises what would be refused but hands out no VC uid."""
        mapped = self.mapping(user, vc) if self.mapping else None
        if self.euid != 0:
            if mapped is not None and resolve(mapped).uid != self.euid:
                raise AccountError(f"the spec maps user {user!r} in VC {vc!r} to unix account {mapped!r}, "
                                   f"but hived runs as uid {self.euid}, not root, and cannot switch accounts")
            return None
        if mapped is not None:
            acc = resolve(mapped)
            if acc.uid == 0:
                raise AccountError(f"the spec maps user {user!r} in VC {vc!r} to root; hived runs no job as "
                                   "root through a mapping (HIVED_JOB_ACCOUNT=server runs unmapped jobs "
                                   "as the server's account)")
            return acc
        if self.mode == "server":
            return None
        if self.mode == "refuse":
            raise AccountError(f"no unix account for user {user!r} in VC {vc!r}: hived runs as root and "
                               "runs no job as root; map one in the spec, or set HIVED_JOB_ACCOUNT=vc "
                               "(a uid per VC) or HIVED_JOB_ACCOUNT=server (run jobs as root)")
        if not allocate:
            return None
        uid = self._vc_uid(vc)
        return Account(uid, uid, (), f"hived-{vc}")

    def _vc_uid(self, vc: str) -> int:
        """The VC's uid from the range, given once and kept for good."""
        self.file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.file.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                table = json.loads(self.file.read_text())
            except FileNotFoundError:
                table = {}
            if vc in table:
                return int(table[vc])
            taken = {int(u) for u in table.values()}
            for uid in range(self.uids[0], self.uids[1] + 1):
                if uid in taken or _exists(uid):
                    continue
                table[vc] = uid
                tmp = self.file.with_suffix(".tmp")
                tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.file)
                return uid
        raise AccountError(f"VC {vc!r}: no free uid left in $HIVED_JOB_UIDS "
                           f"{self.uids[0]}-{self.uids[1]} for a new VC")


def claim_uids(registry: Path, owner: Path, wanted: tuple[int, int] | None, stored: list[int]) -> tuple[int, int]:
    """Claim a uid range for the service whose jobs live in ``owner``, in the host-wide
    ``registry`` (a JSON file, locked while read and written): two services on one host must
    never hand the same uid to their VCs (their jobs could read each other's files and signal
    each other). ``wanted``: the operator's range (``$HIVED_JOB_UIDS``), refused when it overlaps
    another service's; else this service's claim from before, else the first free block of
    the default uids (one holding the uids it already gave, ``stored``). Claims of data
    directories that no longer exist are dropped. Raises AccountError on a collision."""
    owner_key = str(owner.resolve())
    registry.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    with open(os.open(registry.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            claims = {k: tuple(v) for k, v in json.loads(registry.read_text()).items()}
        except FileNotFoundError:
            claims = {}
        except (ValueError, AttributeError, TypeError):
            raise AccountError(f"{registry}: not a uid registry hived can read; fix or remove it "
                               f"(it records which uids each hived service on this host uses)") from None
        claims = {k: v for k, v in claims.items() if k == owner_key or os.path.isdir(k)}
        others = {k: v for k, v in claims.items() if k != owner_key}
        if wanted is None:
            wanted = claims.get(owner_key) or _free_block(others, stored)
        for other, (lo, hi) in sorted(others.items()):
            if wanted[0] <= hi and lo <= wanted[1]:
                raise AccountError(f"uids {wanted[0]}-{wanted[1]} overlap {lo}-{hi}, claimed in {registry} by the "
                                   f"hived service with data in {other}; give this one another $HIVED_JOB_UIDS")
        bad = [u for u in stored if not wanted[0] <= u <= wanted[1]]
        if bad:
            raise AccountError(f"uids {wanted[0]}-{wanted[1]} do not hold uid {bad[0]}, which this data directory "
                               f"already gave a VC ({owner / 'accounts.json'}); keep the range it had")
        if claims.get(owner_key) != tuple(wanted):
            claims[owner_key] = tuple(wanted)
            tmp = registry.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: list(v) for k, v in sorted(claims.items())}, indent=1))
            os.chmod(tmp, 0o600)
            os.replace(tmp, registry)
    return wanted


def _free_block(others: dict, stored: list[int]) -> tuple[int, int]:
    """The first default block no other service claims; with uids already given (``stored``),
    the block that holds them (the caller refuses it when another service claims it)."""
    if stored:
        lo = DEFAULT_UIDS[0] + (min(stored) - DEFAULT_UIDS[0]) // BLOCK * BLOCK
        return (lo, lo + BLOCK - 1)
    for k in range(BLOCKS):
        lo = DEFAULT_UIDS[0] + k * BLOCK
        if all(lo + BLOCK - 1 < a or b < lo for a, b in others.values()):
            return (lo, lo + BLOCK - 1)
    raise AccountError(f"no free block of {BLOCK} uids left in {DEFAULT_UIDS[0]}-"
                       f"{DEFAULT_UIDS[0] + BLOCKS * BLOCK - 1} for this service; set $HIVED_JOB_UIDS")


def shared_account_note(accounts: JobAccounts, vcs: list[str]) -> str | None:
    """Why the jobs of several VCs share one account, when they do (for the operator and admins)."""
    if len(vcs) < 2 or (accounts.euid == 0 and accounts.mode != "server"):
        return None
    why = ("hived does not run as root" if accounts.euid != 0 else "HIVED_JOB_ACCOUNT=server")
    return (f"{why}: the jobs of all {len(vcs)} VCs ({', '.join(vcs)}) run as one account (uid {accounts.euid}), "
            f"so they can read each other's files and environments and signal each other "
            f"(docs/security.md, local mode)")


def _exists(uid: int) -> bool:
    """Taken by a real user or group of this host: never hand it to a VC."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False
