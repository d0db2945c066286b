import pytest
import yaml

from hived.core.sim.cluster import node_spec


def two_vc_spec() -> dict:
    """Two 8-GPU nodes (levels GPU, PCIE, SOCKET, NODE): VC "big" owns one NODE cell,
    VC "small" owns eight 1-GPU cells (the other node)."""
    d = node_spec(2, {"big": 8, "small": 8})
    d["virtualClusters"]["small"] = {"virtualCells": [{"cellType": "NODE.GPU", "cellNumber": 8}]}
    return d


@pytest.fixture
def spec_dict():
    return two_vc_spec()


@pytest.fixture
def spec_file(tmp_path):
    p = tmp_path / "cluster.yaml"
    p.write_text(yaml.safe_dump(two_vc_spec()))
    return p


@pytest.fixture(autouse=True)
def _job_account(request, monkeypatch):
    """Served jobs run as the server's account (the reason: testing/job_account.py)."""
    from hived.testing.job_account import server_account_unless_marked
    server_account_unless_marked(request, monkeypatch)
