"""A FAKE pynvml: one made-up GPU, for checking tests/gpu/on_device.sh without a GPU.

Never a source of facts: the dry run puts this folder first on PYTHONPATH,
and everything it records is marked by the model name "FAKE-GPU (dry run)".
"""
from __future__ import annotations

from types import SimpleNamespace

__version__ = "fake"
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_TIMEOUT = 10
NVML_NVLINK_MAX_LINKS = 18
NVML_FEATURE_ENABLED = 1
NVML_FEATURE_DISABLED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
nvmlEventTypeXidCriticalError = 8
_TEXT = {2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions", 10: "Timeout"}


class NVMLError(Exception):
    _classes: dict = {}

    def __new__(cls, value):
        typ = NVMLError._classes.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return _TEXT.get(self.value, f"NVML Error with code {self.value}")


for _v, _n in ((2, "InvalidArgument"), (3, "NotSupported"), (4, "NoPermission"), (10, "Timeout")):
    NVMLError._classes[_v] = type(f"NVMLError_{_n}", (NVMLError,), {})

_UUID = "GPU-00000000-fake-fake-fake-000000000000"


def _no(code=NVML_ERROR_NOT_SUPPORTED):
    raise NVMLError(code)


def nvmlInit(): return None
def nvmlShutdown(): return None
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i if i == 0 else _no(NVML_ERROR_INVALID_ARGUMENT)
def nvmlDeviceGetName(h): return "FAKE-GPU (dry run)"
def nvmlDeviceGetUUID(h): return _UUID
def nvmlDeviceGetPciInfo(h): return SimpleNamespace(busId=b"00000000:01:00.0")
def nvmlDeviceGetMemoryInfo(h): return SimpleNamespace(total=1 << 30, free=1 << 30, used=0)
def nvmlDeviceGetMigMode(h): return [0, 0]
def nvmlDeviceGetNumaNodeId(h): return _no()
def nvmlDeviceGetNvLinkState(h, link): return _no()
def nvmlDeviceGetTotalEccErrors(h, kind, counter): return 0
def nvmlDeviceGetRetiredPagesPendingStatus(h): return _no()
def nvmlEventSetCreate(): return "fake-events"
def nvmlDeviceRegisterEvents(h, types, events): return None
def nvmlEventSetWait_v2(events, ms): return _no(NVML_ERROR_TIMEOUT)
def nvmlSystemGetDriverVersion(): return "fake"
def nvmlSystemGetNVMLVersion(): return "fake"
def nvmlSystemGetCudaDriverVersion(): return 0
def nvmlDeviceGetCudaComputeCapability(h): return (0, 0)
