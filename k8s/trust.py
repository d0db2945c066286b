"""Which pods hived trusts: only those it made itself, in the namespaces it manages.

Anyone who may create a pod somewhere can give it hived's labels and
annotations. Recovery would then adopt it: a job of a user who is no member of
the VC it names, holding GPUs that another job holds. So every pod hived
creates carries ``hived.io/signature``, an HMAC-SHA256 over what recovery
believes of it: the job id, attempt and rank, the namespace, the VC and user
(from the request annotation), the pod's node and GPUs, the gang's chain and
cells (not its ``opportunistic`` flag, which a spec change may relabel) and the
request.
The key is random, kept in a Secret in hived's own namespace (``SECRET``,
created by the first instance that needs it), and never leaves it.

A pod is trusted when its namespace is the one the policy gives the VC its
request names, and its signature verifies. Any other pod with hived's labels
is *left alone* (not adopted, not deleted, not collected) and reported once,
as a Warning Event on the pod and a log line.
"""
from __future__ import annotations

import base64
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Callable

from kubernetes.client.rest import ApiException

from . import pod_builder as pb

log = logging.getLogger("hived.k8s.trust")

A_SIGNATURE = pb.PREFIX + "signature"
SECRET = "hived-pod-signing"       # in hived's own namespace; data["key"] = 32 random bytes
SECRET_KEY = "key"
_VERSION = "v1"
_CACHE_MAX = 100_000


class SigningKeyError(RuntimeError):
    """The signing key can be neither read nor created (one line: where and why)."""


def signed_fields(pod: dict, memo: dict | None = None) -> list:
    """What the signature covers, read from the pod's own metadata; KeyError/ValueError when missing.
    ``memo``: parsed annotations shared by the pods of one gang (same strings, parsed once)."""
    md = pod["metadata"]
    ann = md.get("annotations") or {}
    memo = {} if memo is None else memo
    text = ann[pb.A_BINDING]
    if text not in memo:
        binding = json.loads(text)
        # the gang's cells only: a downgrade relabels ``opportunistic`` (and drops ``priority``)
        memo[text] = ({int(q["rank"]): q for q in binding["pods"]},
                      [binding["chain"], sorted([int(q["rank"]), q["node"], [int(g) for g in q["gpus"]],
                                                 list(q.get("cells") or [])] for q in binding["pods"])])
    by_rank, gang = memo[text]
    rank = int(ann[pb.A_RANK])
    mine = by_rank[rank]
    req_text = ann[pb.A_REQUEST]
    if req_text not in memo:
        memo[req_text] = json.loads(req_text)
    request = memo[req_text]
    return [_VERSION, ann[pb.A_JOB], int(ann[pb.A_ATTEMPT]), rank, md["namespace"], request.get("vc"),
            request.get("user"), mine["node"], [int(g) for g in mine["gpus"]], gang, req_text]


class PodSigner:
    """Signs hived's pods and tells its own from the rest. ``core``: a CoreV1Api; ``namespace``:
    hived's own namespace (the Secret's); ``namespace_of(vc)``: where the policy runs VC ``vc``."""

    def __init__(self, core, namespace: str, namespace_of: Callable[[str], str]):
        self.core = core
        self.namespace = namespace
        self.namespace_of = namespace_of
        self._key: bytes | None = None
        self._lock = threading.Lock()
        self._verdicts: dict[tuple, str | None] = {}
        self._reported: set = set()

    # -- the key ---------------------------------------------------------
    def key(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = self._load_or_create()
            return self._key

    def _load_or_create(self) -> bytes:
        for _ in range(3):
            try:
                sec = self.core.read_namespaced_secret(SECRET, self.namespace)
                return base64.b64decode((sec.data or {})[SECRET_KEY])
            except ApiException as e:
                if e.status != 404:
                    raise SigningKeyError(f"secret {self.namespace}/{SECRET}: {e.status} {e.reason}") from None
            except KeyError:
                raise SigningKeyError(f"secret {self.namespace}/{SECRET} has no {SECRET_KEY!r} key") from None
            body = {"metadata": {"name": SECRET, "labels": {pb.L_MANAGED: "hived"}}, "type": "Opaque",
                    "data": {SECRET_KEY: base64.b64encode(secrets.token_bytes(32)).decode()}}
            try:
                self.core.create_namespaced_secret(self.namespace, body)
                log.info("created the pod signing key (secret %s/%s)", self.namespace, SECRET)
            except ApiException as e:
                if e.status == 404:         # hived's namespace itself is missing (a bare test cluster)
                    self._create_namespace()
                elif e.status != 409:       # 409: another instance made it first; read that one
                    raise SigningKeyError(f"cannot create secret {self.namespace}/{SECRET}: "
                                          f"{e.status} {e.reason}") from None
        raise SigningKeyError(f"secret {self.namespace}/{SECRET}: neither readable nor creatable")

    def _create_namespace(self) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": self.namespace}})
            log.warning("hived's namespace %r did not exist; created it for the signing key", self.namespace)
        except ApiException as e:
            if e.status != 409:
                raise SigningKeyError(f"hived's namespace {self.namespace!r} does not exist and cannot be "
                                      f"created ({e.status} {e.reason}); create it first") from None

    # -- signing and checking --------------------------------------------
    def signature(self, pod: dict, memo: dict | None = None) -> str:
        return self.mac(signed_fields(pod, memo))

    def mac(self, fields: list) -> str:
        """The HMAC-SHA256 (hex) of ``fields`` (JSON) under hived's key."""
        msg = json.dumps(fields, separators=(",", ":")).encode()
        return hmac.digest(self.key(), msg, "sha256").hex()      # the one-shot C path

    def sign(self, pods: list[dict]) -> list[dict]:
        memo: dict = {}
        for pod in pods:
            pod["metadata"].setdefault("annotations", {})[A_SIGNATURE] = self.signature(pod, memo)
        return pods

    def problem(self, pod: dict) -> str | None:
        """None when hived made ``pod``; else why it is not trusted."""
        md = pod.get("metadata") or {}
        ann = md.get("annotations") or {}
        memo = (md.get("uid"), md.get("namespace"), *(ann.get(k) for k in (
            A_SIGNATURE, pb.A_JOB, pb.A_ATTEMPT, pb.A_RANK, pb.A_BINDING, pb.A_REQUEST)))
        if memo in self._verdicts:
            return self._verdicts[memo]
        verdict = self._judge(md, ann, pod)
        if len(self._verdicts) > _CACHE_MAX:
            self._verdicts.clear()
        self._verdicts[memo] = verdict
        return verdict

    def _judge(self, md: dict, ann: dict, pod: dict) -> str | None:
        try:
            fields = signed_fields(pod)
        except (KeyError, ValueError, TypeError):
            return "its hived annotations are incomplete"
        vc = fields[5]
        try:
            home = self.namespace_of(str(vc))
        except ValueError as e:
            return f"its VC {vc!r} has no namespace hived manages ({e})"
        if md.get("namespace") != home:
            return f"it is in namespace {md.get('namespace')!r}, but VC {vc!r} runs its jobs in {home!r} only"
        sig = ann.get(A_SIGNATURE)
        if not sig:
            return "it carries no hived signature"
        if not hmac.compare_digest(str(sig), self.signature(pod)):
            return "its hived signature does not match what it says (job, VC, user, node, GPUs)"
        return None

    def first_report(self, pod: dict) -> bool:
        """True the first time an untrusted ``pod`` is seen (report it once)."""
        uid = (pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name")
        with self._lock:
            if uid in self._reported:
                return False
            self._reported.add(uid)
            return True
