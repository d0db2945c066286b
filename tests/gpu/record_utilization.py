"""Record what NVML says about GPU 0's utilization while it idles, while a CUDA kernel keeps it
busy, and after: the capture that tests/kernels/test_kernel_gpu_activity.py replays (a kernel
whose GPUs are busy is not idle). Run on a GPU machine with its own Python (nvidia-ml-py, the
driver's libcuda; no CUDA toolkit, no hived install needed):

    python3 tests/gpu/record_utilization.py OUT/capture-utilization.jsonl

The busy phase launches a spinning PTX kernel through the CUDA driver API (libcuda, JIT from
PTX), so nothing but the driver is needed.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import sys
import threading
import time
from pathlib import Path

PTX = r"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 n)
{
  .reg .u32 %r<4>;
  .reg .u64 %rd<3>;
  .reg .pred %p;
  .reg .f32 %f<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, 0;
  mov.f32 %f1, 0f3F800000;
LOOP:
  fma.rn.f32 %f1, %f1, 0f3F7FFFFF, 0f3C23D70A;
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p, %r2, %r1;
  @%p bra LOOP;
  cvta.to.global.u64 %rd2, %rd1;
  st.global.f32 [%rd2], %f1;
  ret;
}
"""


def _check(what: str, rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


def spin(seconds: float, started: threading.Event) -> None:
    """Keep GPU 0 busy for about ``seconds`` with a PTX kernel on every SM."""
    cuda = ctypes.CDLL("libcuda.so.1")
    _check("cuInit", cuda.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    _check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    _check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    mod, fn, buf = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    _check("cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX.encode())))
    _check("cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"))
    _check("cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(4)))
    out, n = ctypes.c_uint64(buf.value), ctypes.c_uint32(20_000_000)
    args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                                 ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    end = time.monotonic() + seconds
    started.set()
    while time.monotonic() < end:
        _check("cuLaunchKernel", cuda.cuLaunchKernel(fn, 264, 1, 1, 256, 1, 1, 0, None, args, None))
        _check("cuCtxSynchronize", cuda.cuCtxSynchronize())


def main() -> int:
    path = Path(sys.argv[1])
    here = Path(__file__).resolve().parents[2] / "service" / "nvml_capture.py"
    spec = importlib.util.spec_from_file_location("nvml_capture", here)
    assert spec and spec.loader
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    import pynvml
    facts = {"host": socket.gethostname().split(".")[0], "cpus": os.cpu_count() or 1, "mem_gb": 0,
             "phases": "idle 4 samples, busy (PTX spin kernel on GPU 0) 10 samples, after 8 samples, 0.5 s apart"}
    nvml = capture.NvmlRecorder(pynvml, path, facts=facts)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    seen = []

    def sample(n: int) -> None:
        for _ in range(n):
            seen.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            time.sleep(0.5)

    sample(4)
    started = threading.Event()
    worker = threading.Thread(target=spin, args=(6.0, started))
    worker.start()
    started.wait(60)
    time.sleep(1.0)        # NVML's utilization is an average over its last sample period
    sample(10)
    worker.join()
    sample(8)
    nvml.nvmlShutdown()
    print("utilization.gpu samples:", seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
