"""GPU health while the service runs: ECC errors, retired pages, XID events.

``HealthMonitor.poll()`` returns ``(node, gpu position, healthy, reason)``
for each GPU that just went bad; the service hands it to
``Engine.set_health`` so the allocator stops binding the GPU and moves the
jobs on it. Each check may be unsupported (VMs, consumer boards): it is then
skipped, and ``notes`` says which.

A GPU that went bad stays bad until the service restarts: a GPU recovering
by itself is rarer than one failing again, and an admin decides.
"""
from __future__ import annotations

# XIDs that mean the GPU (not the program) is in trouble (NVIDIA's XID catalogue)
CRITICAL_XIDS = {
    48: "double-bit ECC error", 63: "ECC page retirement / row remapping pending",
    64: "ECC page retirement / row remapping failure", 74: "NVLink error",
    79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error",
}


class HealthMonitor:
    """Polls NVML. ``nodes``: node name -> NVML indices in position order
    (``Discovery.nodes``)."""

    def __init__(self, nodes: dict, nvml=None):
        self.nodes = nodes
        self.nvml = nvml
        self.notes: list[str] = []
        self._handles: dict = {}       # NVML index -> handle
        self._where: dict = {}         # NVML index -> (node, position)
        self._ecc_base: dict = {}
        self._bad: set = set()
        self._events = None
        self._off: set = set()         # checks found unsupported
        self._unopened: dict = {}      # NVML index -> why it could not be opened

    def start(self) -> None:
        """Open NVML and the GPUs. Never raises for NVML trouble: without NVML
        the monitor checks nothing (``notes`` says why); a GPU NVML cannot
        open is reported unhealthy at the first poll."""
        if self.nvml is None:
            from .nvml_backend import nvml_module
            self.nvml = nvml_module()
        nv = self.nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            self.notes.append(f"health checks off: NVML did not start ({exc})")
            return
        for node, indices in self.nodes.items():
            for pos, i in enumerate(indices):
                self._where[i] = (node, pos)
                try:
                    self._handles[i] = nv.nvmlDeviceGetHandleByIndex(i)
                except nv.NVMLError as exc:
                    self._unopened[i] = f"NVML cannot open the GPU ({exc})"
        for i, h in self._handles.items():
            self._ecc_base[i] = self._ecc(h)
        try:
            self._events = nv.nvmlEventSetCreate()
            for h in self._handles.values():
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, self._events)
        except nv.NVMLError as exc:
            self._events = None
            self._skip("xid", f"XID events not available ({exc})")

    def _skip(self, check: str, note: str) -> None:
        if check not in self._off:
            self._off.add(check)
            self.notes.append(note)

    def _ecc(self, h) -> int | None:
        nv = self.nvml
        if "ecc" in self._off:
            return None
        try:
            return int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                      nv.NVML_VOLATILE_ECC))
        except nv.NVMLError as exc:
            self._skip("ecc", f"ECC error counts not available ({exc})")
            return None

    def poll(self) -> list[tuple[str, int, bool, str]]:
        nv = self.nvml
        found: dict[int, str] = dict(self._unopened)
        for i, h in self._handles.items():
            n = self._ecc(h)
            base = self._ecc_base.get(i)
            if n is not None and base is not None and n > base:
                found[i] = f"{n - base} uncorrected ECC errors"
            if "retired" not in self._off:
                try:
                    if nv.nvmlDeviceGetRetiredPagesPendingStatus(h) == nv.NVML_FEATURE_ENABLED:
                        found.setdefault(i, "retired memory pages pending (reset needed)")
                except nv.NVMLError as exc:
                    self._skip("retired", f"retired-page status not available ({exc})")
        while self._events is not None:
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                break   # timeout: no more events
            xid = int(getattr(data, "eventData", 0))
            idx = next((i for i, h in self._handles.items() if h == getattr(data, "device", None)), None)
            if xid in CRITICAL_XIDS and idx is not None:
                found.setdefault(idx, f"XID {xid}: {CRITICAL_XIDS[xid]}")
        out = []
        for i, why in sorted(found.items()):
            if i not in self._bad:
                self._bad.add(i)
                node, pos = self._where[i]
                out.append((node, pos, False, why))
        return out
