"""GPU discovery with NVML faked by monkeypatching pynvml (no GPU here)."""
from types import SimpleNamespace

import pynvml
import pytest

from hived.jupyter_ext.service.discovery import NoGpuError, chain_name, discover, virtual_node


def err(code):
    return pynvml.NVMLError(code)


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def fake_nvml(monkeypatch, models, topo=None, nvlink=None, numa=None, fail=(), init_error=None, mig=()):
    """Patch the pynvml functions discovery uses. ``fail``: names that raise NotSupported."""
    n = len(models)
    bus = [f"00000000:{0x10 + i:02X}:00.0" for i in range(n)]
    calls = []

    def f(name, impl):
        def wrapper(*a):
            calls.append(name)
            if name in fail:
                raise err(NOT_SUPPORTED)
            return impl(*a)
        monkeypatch.setattr(pynvml, name, wrapper)

    def init():
        if init_error is not None:
            raise err(init_error)
    monkeypatch.setattr(pynvml, "nvmlInit", init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    f("nvmlDeviceGetCount", lambda: n)
    f("nvmlDeviceGetHandleByIndex", lambda i: i)
    f("nvmlDeviceGetName", lambda h: models[h])
    f("nvmlDeviceGetUUID", lambda h: f"GPU-{h:04d}")
    f("nvmlDeviceGetPciInfo", lambda h: SimpleNamespace(busId=bus[h]))
    f("nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(total=80 << 30))
    f("nvmlDeviceGetMigMode", lambda h: [1 if h in mig else 0, 0])
    f("nvmlDeviceGetNumaNodeId", lambda h: (numa or {}).get(h, 0))
    f("nvmlDeviceGetTopologyCommonAncestor", lambda a, b: (topo or (lambda a, b: 50))(a, b))

    def link_state(h, link):
        peers = (nvlink or {}).get(h, [])
        if link >= max(len(peers), 4):
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1 if link < len(peers) else 0
    f("nvmlDeviceGetNvLinkState", link_state)
    f("nvmlDeviceGetNvLinkRemotePciInfo", lambda h, link: SimpleNamespace(busId=bus[nvlink[h][link]]))
    return calls


def dgx_topo(a, b):
    """8 GPUs: pairs behind a PCIe switch, 4 per socket."""
    if a // 2 == b // 2:
        return 20
    if a // 4 == b // 4:
        return 40
    return 50


def test_full_topology_gives_switch_socket_node_levels(monkeypatch):
    fake_nvml(monkeypatch, ["NVIDIA A100-SXM4-40GB"] * 8, topo=dgx_topo)
    d = discover(host="box")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["A100-SXM4-40GB-SWITCH"] == {"childCellType": "A100-SXM4-40GB", "childCellNumber": 2}
    assert ct["A100-SXM4-40GB-SOCKET"] == {"childCellType": "A100-SXM4-40GB-SWITCH", "childCellNumber": 2}
    node = ct["A100-SXM4-40GB-NODE"]
    assert node["childCellType"] == "A100-SXM4-40GB-SOCKET" and node["childCellNumber"] == 2 and node["isNodeLevel"]
    top = d.spec["physicalCluster"]["physicalCells"]
    assert top[0]["cellType"] == "A100-SXM4-40GB-NODE" and top[0]["cellAddress"] == "box"
    assert d.spec["virtualClusters"] == {"default": {"virtualCells": [
        {"cellType": "A100-SXM4-40GB-NODE.A100-SXM4-40GB-NODE", "cellNumber": 1}]}}
    assert d.gpu_ids[("box", 3)] == "GPU-0003"
    assert d.gpus[0].pci_bus_id and d.gpus[0].memory_mib == 80 * 1024


def test_vm_h100_every_topology_call_not_supported(monkeypatch):
    # what an H100 in a VM answers (see NOTES.md): NVLink, topology and NUMA unsupported
    fake_nvml(monkeypatch, ["NVIDIA H100 80GB HBM3"] * 2,
              fail={"nvmlDeviceGetNvLinkState", "nvmlDeviceGetTopologyCommonAncestor",
                    "nvmlDeviceGetNumaNodeId"})
    d = discover(host="vm")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert list(ct) == ["H100-80GB-HBM3-NODE"]
    assert ct["H100-80GB-HBM3-NODE"]["childCellType"] == "H100-80GB-HBM3"
    assert ct["H100-80GB-HBM3-NODE"]["childCellNumber"] == 2
    text = "\n".join(d.notes)
    assert "GPU pair topology (common ancestor) unavailable" in text
    assert "NVLink state unavailable" in text
    assert "NUMA node unknown: assumed no socket level" in text


def test_numa_fallback_for_socket_level(monkeypatch):
    fake_nvml(monkeypatch, ["NVIDIA L4"] * 4, numa={0: 0, 1: 0, 2: 1, 3: 1},
              fail={"nvmlDeviceGetTopologyCommonAncestor"})
    d = discover(host="h")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["L4-SOCKET"]["childCellNumber"] == 2 and ct["L4-NODE"]["childCellNumber"] == 2
    assert any("NUMA node" in n for n in d.notes)


def test_nvlink_pairs_become_a_level(monkeypatch):
    fake_nvml(monkeypatch, ["NVIDIA V100"] * 4, nvlink={0: [1], 1: [0], 2: [3], 3: [2]},
              fail={"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNumaNodeId"})
    d = discover(host="h")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["V100-NVLINK"] == {"childCellType": "V100", "childCellNumber": 2}
    assert d.nvlink[0] == [1]


def test_unequal_groups_are_dropped_with_a_note(monkeypatch):
    # 3 GPUs behind one switch, 1 alone: not a uniform level
    fake_nvml(monkeypatch, ["NVIDIA T4"] * 4, topo=lambda a, b: 20 if max(a, b) < 3 else 50)
    d = discover(host="h")
    assert list(d.spec["physicalCluster"]["cellTypes"]) == ["T4-NODE"]
    assert any("unequal sizes" in n for n in d.notes)


def test_two_models_two_chains_and_mig_note(monkeypatch):
    fake_nvml(monkeypatch, ["NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", "Tesla T4"], mig={1},
              fail={"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNvLinkState"})
    d = discover(host="mix")
    tops = {c["cellType"]: c["cellAddress"] for c in d.spec["physicalCluster"]["physicalCells"]}
    assert tops == {"A100-80GB-PCIe-NODE": "mix-A100-80GB-PCIe", "Tesla-T4-NODE": "mix-Tesla-T4"}
    assert d.nodes["mix-Tesla-T4"] == [2]
    assert d.gpu_ids[("mix-Tesla-T4", 0)] == "GPU-0002"
    assert any("MIG enabled" in n for n in d.notes)


@pytest.mark.parametrize("code,words", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
])
def test_no_driver_is_a_clear_error(monkeypatch, code, words):
    fake_nvml(monkeypatch, [], init_error=code)
    with pytest.raises(NoGpuError, match=rf"no NVIDIA driver or GPU found \(NVML: {words}\); use --gpus N"):
        discover()


def test_real_nvml_without_a_driver():
    # this machine has no NVIDIA driver: the real library must fail the same clear way
    try:
        d = discover()
    except NoGpuError as e:
        assert "--gpus N" in str(e)
    else:  # on a GPU machine: a spec with at least one node
        assert d.spec["physicalCluster"]["physicalCells"]


def test_zero_gpus(monkeypatch):
    fake_nvml(monkeypatch, [])
    with pytest.raises(NoGpuError, match="reports no GPUs"):
        discover()


def test_virtual_node_and_vc_split():
    d = virtual_node(8, vcs=["team-a", "team-b"])
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["VIRTUAL-GPU-SOCKET"]["childCellNumber"] == 4
    assert d.spec["virtualClusters"]["team-a"]["virtualCells"] == [
        {"cellType": "VIRTUAL-GPU-NODE.VIRTUAL-GPU-SOCKET", "cellNumber": 1}]
    assert list(virtual_node(3).spec["physicalCluster"]["cellTypes"]) == ["VIRTUAL-GPU-NODE"]
    for bad in (0, -1, 5000, 2.5, True):
        with pytest.raises(ValueError, match="--gpus"):
            virtual_node(bad)


def test_chain_names():
    assert chain_name("NVIDIA H100 80GB HBM3") == "H100-80GB-HBM3"
    assert chain_name("Tesla V100-SXM2-16GB") == "Tesla-V100-SXM2-16GB"
