"""Answer NVML calls from a capture (:mod:`hived.service.nvml_capture`).

``NvmlReplay(path)`` stands in for the ``pynvml`` module: each call is
looked up by its function name and arguments and gets the answer the real
GPU gave, or raises the same NVML error (the real ``pynvml.NVMLError``
subclass with the same code, when nvidia-ml-py is installed). A call made
several times gets the recorded answers in order, then the last one again
(a health watcher polls longer than the capture ran). A call the capture
never saw raises :class:`ReplayMiss`, so code that asks NVML something new
fails loudly instead of being told something made up.
"""
from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

from .nvml_capture import FORMAT


class ReplayMiss(LookupError):
    """The code asked NVML something the capture does not hold."""


class ReplayHandle:
    """An NVML handle in a replay; the same token gives the same object."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return f"<NVML handle {self.token}>"


class _ReplayError(Exception):
    """NVML's error when nvidia-ml-py is not installed: same code, same text."""

    def __init__(self, value: int | None, text: str = "") -> None:
        super().__init__(text)
        self.value, self.text = value, text

    def __str__(self) -> str:
        return self.text


def _error_class() -> Any:
    try:
        import pynvml
    except ImportError:
        return _ReplayError
    return pynvml.NVMLError


class NvmlReplay:
    """The ``pynvml`` module, answering from the capture at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.NVMLError = _error_class()
        self._handles: dict[str, ReplayHandle] = {}
        self._answers: dict[str, list[dict[str, Any]]] = {}
        self._served: dict[str, int] = {}
        self._consts: dict[str, Any] = {}
        with open(self.path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        if not lines or lines[0].get("capture") != FORMAT:
            raise ValueError(f"{self.path}: not a hived NVML capture (first line must have capture={FORMAT!r})")
        self.facts: dict[str, Any] = lines[0]
        for n, line in enumerate(lines[1:], start=2):
            if "const" in line:
                self._consts[line["const"]] = line["value"]
            elif "fn" in line:
                self._answers.setdefault(self._key(line["fn"], line["args"]), []).append(line)
            else:
                raise ValueError(f"{self.path}:{n}: neither a call nor a constant: {line!r}")

    @staticmethod
    def _key(fn: str, args: list[Any]) -> str:
        return json.dumps([fn, args], sort_keys=True)

    def handle(self, token: str) -> ReplayHandle:
        if token not in self._handles:
            self._handles[token] = ReplayHandle(token)
        return self._handles[token]

    def calls(self, fn: str) -> list[dict[str, Any]]:
        """Every recorded call of ``fn``, in order (for tests and reports)."""
        return [a for answers in self._answers.values() for a in answers if a["fn"] == fn]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._consts:
            return self._consts[name]
        if name.startswith("nvml"):
            return self._function(name)
        try:
            import pynvml
        except ImportError:
            raise AttributeError(f"{name}: not in the capture {self.path}") from None
        return getattr(pynvml, name)

    def _function(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            key = self._key(name, [self._encode(a) for a in args])
            answers = self._answers.get(key)
            if not answers:
                raise ReplayMiss(f"{self.path}: no recorded answer to {name}{tuple(args)!r}")
            n = self._served.get(key, 0)
            self._served[key] = n + 1
            line = answers[min(n, len(answers) - 1)]
            if "error" in line:
                raise self._error(line["error"])
            return self._decode(line["ok"])
        call.__name__ = name
        return call

    def _error(self, err: dict[str, Any]) -> BaseException:
        cls = self.NVMLError
        if cls is _ReplayError:
            return _ReplayError(err.get("value"), err.get("text", ""))
        table = getattr(cls, "_errcode_to_string", None)
        if isinstance(table, dict) and err.get("value") not in table:
            table[err.get("value")] = err.get("text", "")   # the library's own cache of error texts
        exc: BaseException = cls(err.get("value"))
        return exc

    def _encode(self, value: Any) -> Any:
        if isinstance(value, ReplayHandle):
            return {"handle": value.token}
        if isinstance(value, (list, tuple)):
            return [self._encode(v) for v in value]
        return value

    def _decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "handle" in value:
            return self.handle(value["handle"])
        if "bytes" in value:
            return value["bytes"].encode("latin-1")
        if "struct" in value:
            return SimpleNamespace(**{k: self._decode(v) for k, v in value["fields"].items()})
        return value
