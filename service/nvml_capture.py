"""Record every NVML call hived makes, with its answer or its exact error.

A capture is a JSON-lines file. The first line describes the machine (host
name, CPUs, memory: what discovery reads besides NVML); then one line per
constant read and per call, in call order::

    {"capture": "hived-nvml", "version": 1, "host": "h100-a", "cpus": 16, "mem_gb": 125, ...}
    {"const": "NVML_NVLINK_MAX_LINKS", "value": 18}
    {"fn": "nvmlDeviceGetHandleByIndex", "args": [0], "ok": {"handle": "device:0"}}
    {"fn": "nvmlDeviceGetNvLinkState", "args": [{"handle": "device:0"}, 0],
     "error": {"type": "NVMLError_NotSupported", "value": 3, "text": "Not Supported"}}

ctypes structures become ``{"struct": name, "fields": {...}}``, byte strings
``{"bytes": text}`` and NVML handles ``{"handle": token}``, where the token
names the call that made the handle. :mod:`hived.service.nvml_replay` answers
from such a file, so CI replays what a real GPU said.

``NvmlRecorder(pynvml, path)`` stands in for the ``pynvml`` module: every
function is passed through and logged, every error re-raised unchanged.
"""
from __future__ import annotations

import ctypes
import json
import os
import socket
import threading
import time
from typing import Any

FORMAT = "hived-nvml"
VERSION = 1


def host_facts() -> dict[str, Any]:
    """What discovery reads about the machine besides NVML."""
    from .discovery import _mem_gb
    return {"host": socket.gethostname().split(".")[0], "cpus": os.cpu_count() or 1, "mem_gb": _mem_gb()}


class _Handles:
    """Gives each NVML handle (a ctypes pointer) a stable name."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._count = 0

    def name(self, ptr: Any, made_by: str | None = None) -> str:
        addr = ctypes.cast(ptr, ctypes.c_void_p).value or 0
        if addr not in self._names:
            self._count += 1
            self._names[addr] = made_by or f"handle:{self._count}"
        return self._names[addr]


def encode(value: Any, handles: _Handles) -> Any:
    """A JSON value for an NVML argument or answer (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, (list, tuple)):
        return [encode(v, handles) for v in value]
    if isinstance(value, ctypes._Pointer):
        return {"handle": handles.name(value)}
    if isinstance(value, ctypes.Structure):
        fields = {f[0]: encode(getattr(value, f[0]), handles) for f in value._fields_}
        return {"struct": type(value).__name__, "fields": fields}
    if isinstance(value, ctypes.Array):
        return [encode(v, handles) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return encode(value.value, handles)
    if hasattr(value, "__dict__"):   # a plain record (a test's fake NVML answers with SimpleNamespace)
        return {"struct": type(value).__name__, "fields": {k: encode(v, handles) for k, v in vars(value).items()}}
    return {"repr": repr(value)}


def _version(nvml: Any) -> str | None:
    try:
        from importlib.metadata import version
        return version("nvidia-ml-py")
    except Exception:   # not installed as a distribution (a fake module, a copied file)
        return getattr(nvml, "__version__", None)


def encode_error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "value": getattr(exc, "value", None), "text": str(exc)}


class NvmlRecorder:
    """The ``pynvml`` module, with every call and constant read appended to ``path``."""

    def __init__(self, nvml: Any, path: str | os.PathLike[str], facts: dict[str, Any] | None = None) -> None:
        self._nvml = nvml
        self._path = os.fspath(path)
        self._lock = threading.Lock()
        self._handles = _Handles()
        self._consts: set[str] = set()
        self._t0 = time.monotonic()
        self.NVMLError = nvml.NVMLError
        self.facts = facts or host_facts()   # what discovery reads besides NVML, recorded with it
        if not os.path.exists(self._path) or os.path.getsize(self._path) == 0:
            head = {"capture": FORMAT, "version": VERSION, **self.facts,
                    "nvidia_ml_py": _version(nvml),
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            self._write(head)

    def _write(self, line: dict[str, Any]) -> None:
        with self._lock, open(self._path, "a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if isinstance(attr, type) or not callable(attr):
            if isinstance(attr, (int, str)) and name not in self._consts:
                self._consts.add(name)
                self._write({"const": name, "value": attr})
            return attr
        return self._wrap(name, attr)

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            line: dict[str, Any] = {"fn": name, "args": [encode(a, self._handles) for a in args],
                                    "t": round(time.monotonic() - self._t0, 3)}
            try:
                out = fn(*args)
            except self._nvml.NVMLError as exc:
                line["error"] = encode_error(exc)
                self._write(line)
                raise
            if name == "nvmlDeviceGetHandleByIndex" and args:
                self._handles.name(out, f"device:{args[0]}")
            elif name == "nvmlEventSetCreate":
                self._handles.name(out, "eventset")
            line["ok"] = encode(out, self._handles)
            self._write(line)
            return out
        call.__name__ = name
        return call
