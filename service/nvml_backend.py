"""Which NVML hived talks to: the driver's, a recording of it, or a replay.

``$HIVED_NVML_REPLAY=FILE`` answers every NVML call from a capture (CI runs
discovery and health on what a real H100 said); ``$HIVED_NVML_RECORD=FILE``
talks to the driver and appends every call and answer to FILE (what
``tests/gpu/on_device.sh`` does on a GPU machine). Neither set: the
``pynvml`` module of nvidia-ml-py itself.
"""
from __future__ import annotations

import os
from typing import Any

_recorders: dict[str, Any] = {}


def nvml_module() -> Any:
    """The NVML to use, as the environment says (see the module docstring)."""
    replay = os.environ.get("HIVED_NVML_REPLAY")
    if replay:
        from .nvml_replay import NvmlReplay
        return NvmlReplay(replay)
    import pynvml
    record = os.environ.get("HIVED_NVML_RECORD")
    if not record:
        return pynvml
    if record not in _recorders:   # one per file, so handles keep their names across callers
        from .nvml_capture import NvmlRecorder
        _recorders[record] = NvmlRecorder(pynvml, record)
    return _recorders[record]
