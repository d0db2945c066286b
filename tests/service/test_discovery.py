"""GPU discovery with NVML faked by monkeypatching pynvml (no GPU here)."""
import pynvml
import pytest

from hived.service.discovery import NoGpuError, chain_name, discover, virtual_node

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def dgx_topo(a, b):
    """8 GPUs: pairs behind a PCIe switch, 4 per socket."""
    if a // 2 == b // 2:
        return 20
    if a // 4 == b // 4:
        return 40
    return 50


def test_full_topology_gives_switch_socket_node_levels(nvml_fake):
    nvml_fake(["NVIDIA A100-SXM4-40GB"] * 8, topo=dgx_topo)
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


def test_vm_h100_every_topology_call_not_supported(nvml_fake):
    # what an H100 in a VM answers: NVLink, topology and NUMA unsupported
    nvml_fake(["NVIDIA H100 80GB HBM3"] * 2,
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


def test_numa_fallback_for_socket_level(nvml_fake):
    nvml_fake(["NVIDIA L4"] * 4, numa={0: 0, 1: 0, 2: 1, 3: 1},
              fail={"nvmlDeviceGetTopologyCommonAncestor"})
    d = discover(host="h")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["L4-SOCKET"]["childCellNumber"] == 2 and ct["L4-NODE"]["childCellNumber"] == 2
    assert any("NUMA node" in n for n in d.notes)


def test_nvlink_pairs_become_a_level(nvml_fake):
    nvml_fake(["NVIDIA V100"] * 4, nvlink={0: [1], 1: [0], 2: [3], 3: [2]},
              fail={"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNumaNodeId"})
    d = discover(host="h")
    ct = d.spec["physicalCluster"]["cellTypes"]
    assert ct["V100-NVLINK"] == {"childCellType": "V100", "childCellNumber": 2}
    assert d.nvlink[0] == [1]


def test_unequal_groups_are_dropped_with_a_note(nvml_fake):
    # 3 GPUs behind one switch, 1 alone: not a uniform level
    nvml_fake(["NVIDIA T4"] * 4, topo=lambda a, b: 20 if max(a, b) < 3 else 50)
    d = discover(host="h")
    assert list(d.spec["physicalCluster"]["cellTypes"]) == ["T4-NODE"]
    assert any("unequal sizes" in n for n in d.notes)


def test_two_models_two_chains_and_mig_note(nvml_fake):
    nvml_fake(["NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", "Tesla T4"], mig={1},
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
def test_no_driver_is_a_clear_error(nvml_fake, code, words):
    nvml_fake([], init_error=code)
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


def test_zero_gpus(nvml_fake):
    nvml_fake([])
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


# every per-GPU NVML call discovery makes, and the words its note must carry
PER_CALL = [
    ("nvmlDeviceGetName", "GPU model name unavailable"),
    ("nvmlDeviceGetUUID", "GPU UUID unavailable"),
    ("nvmlDeviceGetPciInfo", "PCI bus id unavailable"),
    ("nvmlDeviceGetMemoryInfo", "GPU memory size unavailable"),
    ("nvmlDeviceGetMigMode", "MIG mode unavailable"),
    ("nvmlDeviceGetNumaNodeId", "NUMA node unavailable"),
    ("nvmlDeviceGetTopologyCommonAncestor", "GPU pair topology (common ancestor) unavailable"),
    ("nvmlDeviceGetNvLinkState", "NVLink state unavailable"),
    ("nvmlDeviceGetNvLinkRemotePciInfo", "NVLink remote PCI info unavailable"),
]


@pytest.mark.parametrize("error", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_UNKNOWN,
                                   pynvml.NVML_ERROR_GPU_IS_LOST], ids=["not-supported", "unknown", "gpu-lost"])
@pytest.mark.parametrize("call,words", PER_CALL, ids=[c for c, _ in PER_CALL])
def test_each_call_failing_degrades_with_a_note(nvml_fake, call, words, error):
    """One NVML call failing for every GPU: still a spec that loads, with all 8
    GPUs, and a note naming the call and what is missing."""
    from hived.core.spec import load_spec
    nvml_fake(["NVIDIA A100-SXM4-40GB"] * 8, topo=dgx_topo, numa={i: i // 4 for i in range(8)},
              nvlink={i: [i ^ 1] for i in range(8)}, fail={call}, error=error)
    d = discover(host="box")
    spec = load_spec(d.spec)
    assert sum(c.gpus for c in spec.chains.values()) == 8
    note = next((n for n in d.notes if words in n), None)
    assert note is not None and call in note and pynvml.NVMLError(error).__str__() in note, d.notes
    assert len(d.gpu_ids) == 8 and len(set(d.gpu_ids.values())) == 8
    if call == "nvmlDeviceGetUUID":          # no UUIDs: CUDA_VISIBLE_DEVICES gets NVML indices
        assert sorted(d.gpu_ids.values()) == [str(i) for i in range(8)]
    if call == "nvmlDeviceGetTopologyCommonAncestor":   # sockets still come from the NUMA nodes
        assert "A100-SXM4-40GB-SOCKET" in d.spec["physicalCluster"]["cellTypes"]


def test_one_gpu_failing_one_call_only(nvml_fake):
    # NUMA known for GPUs 0-2 only: the socket level cannot be trusted, and is dropped
    nvml_fake(["NVIDIA L4"] * 4, numa={0: 0, 1: 0, 2: 1, 3: 1}, fail={"nvmlDeviceGetTopologyCommonAncestor"},
              fail_on={"nvmlDeviceGetNumaNodeId": {3}})
    d = discover(host="h")
    assert list(d.spec["physicalCluster"]["cellTypes"]) == ["L4-NODE"]
    assert any("NUMA node unknown: assumed no socket level" in n for n in d.notes)


def test_a_gpu_nvml_cannot_open_is_left_out(nvml_fake):
    nvml_fake(["NVIDIA L4"] * 4, fail_on={"nvmlDeviceGetHandleByIndex": {2}}, error=pynvml.NVML_ERROR_GPU_IS_LOST)
    d = discover(host="h")
    assert [g.index for g in d.gpus] == [0, 1, 3] and d.nodes["h"] == [0, 1, 3]
    assert any(n.startswith("GPU 2 left out: NVML cannot open it") for n in d.notes)
    assert d.spec["physicalCluster"]["cellTypes"]["L4-NODE"]["childCellNumber"] == 3


def test_no_gpu_can_be_opened(nvml_fake):
    nvml_fake(["NVIDIA L4"] * 2, fail={"nvmlDeviceGetHandleByIndex"})
    with pytest.raises(NoGpuError, match="NVML counts 2 GPUs but cannot open any of them"):
        discover()


def test_count_failing(nvml_fake):
    nvml_fake(["NVIDIA L4"] * 2, fail={"nvmlDeviceGetCount"}, error=pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(NoGpuError, match=r"NVML cannot count GPUs \(Unknown Error\)"):
        discover()
