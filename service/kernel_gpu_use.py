"""GPU utilization of kernel jobs, the second signal of idle release (service/kernel_idle.py).

Where the spec's nodes are this machine's GPUs (``LocalGpus``, service/local_gpus.py), the
service reads NVML's ``utilization.gpu`` of the GPUs a running kernel job holds; a kernel
whose GPUs show work counts as active (``hived.core.kernel_idle.gpus_in_use``). NVML comes
from ``nvml_backend.nvml_module()``: the driver's, or a capture's replay. NVML trouble never
stops idle release: a GPU it cannot read counts as showing nothing, and the service log
says so once.
"""
from __future__ import annotations

import logging
from typing import Any

from hived.core.jobs import Placement

log = logging.getLogger("hived.service")


class KernelGpuUse:
    """``nodes``: node name -> NVML indices in position order (``LocalGpus.nodes``)."""

    def __init__(self, nodes: dict[str, list[int]], nvml: Any = None):
        self.nodes = nodes
        self.nvml = nvml
        self.notes: list[str] = []
        self._started = False
        self._off = False
        self._handles: dict[int, Any] = {}
        self._unreadable: set[int] = set()

    def _note(self, text: str) -> None:
        log.warning("kernel idle release: %s", text)
        self.notes.append(text)

    def _start(self) -> None:
        self._started = True
        try:
            if self.nvml is None:
                from .nvml_backend import nvml_module
                self.nvml = nvml_module()
            self.nvml.nvmlInit()
        except Exception as exc:   # no driver, nvidia-ml-py missing: cell activity only
            self._off = True
            self._note(f"GPU utilization not read, cell activity only: NVML did not start ({exc})")

    def utilization(self, placement: Placement) -> list[int | None]:
        """``utilization.gpu`` (percent) of each GPU of the placement on this machine; None where
        it cannot be read (a node that is not this machine, NVML trouble)."""
        if not self._started:
            self._start()
        out: list[int | None] = []
        for pod in placement.pods:
            indices = self.nodes.get(pod.node)
            for pos in pod.gpus:
                index = indices[pos] if indices is not None and pos < len(indices) else None
                out.append(None if index is None or self._off else self._read(index))
        return out

    def _read(self, index: int) -> int | None:
        try:
            if index not in self._handles:
                self._handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
            return int(self.nvml.nvmlDeviceGetUtilizationRates(self._handles[index]).gpu)
        except Exception as exc:   # NVMLError (NotSupported on some GPUs), a replay that lacks the call
            if index not in self._unreadable:
                self._unreadable.add(index)
                self._note(f"GPU {index}: utilization not readable ({type(exc).__name__}: {exc}); "
                           "its kernels are judged on cell activity only")
            return None
