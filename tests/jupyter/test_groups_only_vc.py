"""A VC that admits by Hub groups only, met by an identity that carries none (a ``--user-tokens``
token): the refusal says "users or groups", names no group, and accepts nothing (docs/jupyterhub.md)."""
import pytest
import yaml

from hived.service.client import HivedError

from .conftest import SPEC, LiveServer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def groups_only(tmp_path):
    doc = yaml.safe_load(SPEC.read_text())
    vcb = doc["virtualClusters"]["vcb"]
    vcb.pop("users")
    vcb["groups"] = ["team-b"]                    # bob's token carries no groups: he is out now
    doc["virtualClusters"]["vca"]["groups"] = ["team-a"]   # vca: users and groups
    spec = tmp_path / "groups_only.yaml"
    spec.write_text(yaml.safe_dump(doc))
    (tmp_path / "data").mkdir()
    server = LiveServer(tmp_path / "data", spec=spec)
    yield server
    server.stop()


def test_a_groups_only_vc_refuses_a_token_without_groups_saying_users_or_groups(groups_only):
    alice = groups_only.client("alice")
    with pytest.raises(HivedError) as err:
        alice.submit({"vc": "vcb", "command": "true", "gpus": 1})
    assert err.value.status == 403
    assert err.value.line() == "vc: user 'alice' may not submit to VC 'vcb' (not in its users or groups)"
    assert "team-b" not in err.value.line()     # which group admits is not an outsider's to know
    assert groups_only.client("root").jobs() == []    # nothing was accepted
    # a VC with users and groups still admits its named users
    assert alice.submit({"vc": "vca", "command": "true", "gpus": 1})["vc"] == "vca"
