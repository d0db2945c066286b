"""A hived job's view of CUDA, through the driver (ctypes on libcuda): no framework needed.

Prints one JSON line: CUDA_VISIBLE_DEVICES as the job got it, the device
count, each device's UUID, name and memory, and whether a 1 MiB allocation
(written and freed) worked. ``CUDA_PROBE_FAKE=1`` is for checking the
plumbing on a machine without a GPU (tests/gpu/on_device.sh's dry run): it
reports the devices named in CUDA_VISIBLE_DEVICES, marked ``"fake": true``.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import time


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def real() -> dict:
    cu = ctypes.CDLL("libcuda.so.1")

    def check(what: str, rc: int) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            cu.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {rc} {(name.value or b'?').decode()}")

    check("cuInit", cu.cuInit(0))
    count = ctypes.c_int()
    check("cuDeviceGetCount", cu.cuDeviceGetCount(ctypes.byref(count)))
    devices = []
    for i in range(count.value):
        dev = ctypes.c_int()
        check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), i))
        uuid = (ctypes.c_ubyte * 16)()
        check("cuDeviceGetUuid_v2", cu.cuDeviceGetUuid_v2(ctypes.byref(uuid), dev))
        name = ctypes.create_string_buffer(256)
        check("cuDeviceGetName", cu.cuDeviceGetName(name, 256, dev))
        mem = ctypes.c_size_t()
        check("cuDeviceTotalMem_v2", cu.cuDeviceTotalMem_v2(ctypes.byref(mem), dev))
        ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
        check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
        check("cuMemAlloc_v2", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)))
        check("cuMemsetD8_v2", cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0x5A), ctypes.c_size_t(1 << 20)))
        check("cuCtxSynchronize", cu.cuCtxSynchronize())
        check("cuMemFree_v2", cu.cuMemFree_v2(ptr))
        check("cuDevicePrimaryCtxRelease_v2", cu.cuDevicePrimaryCtxRelease_v2(dev))
        devices.append({"ordinal": i, "uuid": _uuid(bytes(uuid)), "name": name.value.decode(),
                        "memory_bytes": mem.value, "alloc_1mib": True})
    return {"count": count.value, "devices": devices}


def fake() -> dict:
    seen = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    return {"fake": True, "count": len(seen),
            "devices": [{"ordinal": i, "uuid": u, "name": "FAKE", "alloc_1mib": True} for i, u in enumerate(seen)]}


def main() -> int:
    out = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "job": os.environ.get("HIVED_JOB_ID"),
           "uid": os.getuid()}
    try:
        out.update(fake() if os.environ.get("CUDA_PROBE_FAKE") == "1" else real())
    except (OSError, RuntimeError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    print("CUDA_PROBE " + json.dumps(out), flush=True)
    if "--hold" in sys.argv:   # stay running a moment, so the placement can be read while it runs
        time.sleep(float(sys.argv[sys.argv.index("--hold") + 1]))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
