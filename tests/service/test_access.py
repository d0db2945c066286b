"""``Access`` alone, from a real spec: every role against every check, and the refusal texts.

The REST matrix (tests/jupyter/test_authz_matrix.py) asks the same object through a server;
this file is the fast one `make mutants` runs against service/access.py."""
from __future__ import annotations

import dataclasses

import pytest

from hived.core.spec import load_spec
from hived.service.access import SERVER_ACCOUNT, Access

from ..core.core_helpers import rack_doc

VCS = {
    "vca": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 1}],
            "users": ["alice"], "admins": ["ada"], "groups": ["team-a"], "adminGroups": ["leads-a"]},
    "vcb": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 1}], "users": ["bob"]},
}


@pytest.fixture
def access() -> Access:
    doc = rack_doc(1, VCS)
    doc["admins"] = ["root"]
    doc["adminGroups"] = ["ops"]
    return Access.from_spec(load_spec(doc))


# who (user, groups) -> (cluster admin, vca admin, vca member, vcb member)
ROLES = {
    ("alice", ()): (False, False, True, False),
    ("carol", ("team-a",)): (False, False, True, False),
    ("ada", ()): (False, True, True, False),
    ("lee", ("leads-a",)): (False, True, True, False),
    ("bob", ()): (False, False, False, True),
    ("root", ()): (True, True, True, True),
    ("opal", ("ops",)): (True, True, True, True),
    ("srv", (SERVER_ACCOUNT,)): (True, True, True, True),
    ("eve", ()): (False, False, False, False),
    ("eve", ("team-b", "leads-b")): (False, False, False, False),
}


@pytest.mark.parametrize(("who", "expected"), ROLES.items(), ids=[f"{u}{list(g)}" for u, g in ROLES])
def test_each_role_gets_exactly_its_rights(access, who, expected):
    user, groups = who
    admin, vca_admin, vca_member, vcb_member = expected
    assert access.is_admin(user, groups) is admin
    assert access.is_vc_admin(user, "vca", groups) is vca_admin
    assert access.is_member(user, "vca", groups) is vca_member
    assert access.is_member(user, "vcb", groups) is vcb_member
    assert access.is_vc_admin(user, "vcb", groups) is admin   # vcb names no admins
    assert access.known(user, groups) is (vca_member or vcb_member)
    assert access.vcs_of(user, groups) == [vc for vc, ok in (("vca", vca_member), ("vcb", vcb_member)) if ok]
    assert access.may_see_job(user, "vca", "alice", groups) is (user == "alice" or vca_member)
    assert access.may_see_job(user, "vca", user, groups) is True          # the owner always
    assert access.may_change_job(user, "vca", "alice", groups) is (user == "alice" or vca_admin)
    assert access.may_change_job(user, "vcb", user, groups) is True


def test_a_group_of_one_vc_gives_nothing_in_another(access):
    assert not access.is_member("carol", "vcb", ["team-a"])
    assert not access.is_vc_admin("lee", "vcb", ["leads-a"])
    assert not access.is_member("x", "no-such-vc", ["team-a", "leads-a"])


def test_a_group_named_like_the_server_account_is_not_it(access):
    assert not access.is_admin("eve", ["SERVER_ACCOUNT"])
    assert not access.is_admin("SERVER_ACCOUNT")
    assert repr(SERVER_ACCOUNT) == "SERVER_ACCOUNT"


def test_groups_may_be_any_iterable_and_are_read_once(access):
    assert access.is_member("carol", "vca", iter(["team-a"]))
    assert access.known("carol", iter(["team-a"]))
    assert access.vcs_of("opal", iter(["ops"])) == ["vca", "vcb"]


def test_refusal_texts_name_members_and_admins(access):
    assert access.members_text("vca") == "ada, alice, group leads-a, group team-a"
    assert access.members_text("vcb") == "bob"
    assert Access(vc_users={"x": frozenset()}).members_text("x") == "none but the cluster admins"
    assert access.admins_text("vca") == "ada, root, group leads-a, group ops"
    assert access.admins_text("vcb") == "root, group ops"
    assert Access().admins_text("x") == "none"
    assert access.vcs_text("alice") == "vca"
    assert access.vcs_text("root") == "vca, vcb"
    assert access.vcs_text("eve") == "none"


def test_admins_are_named_only_to_members(access):
    assert access.admins_for("alice", "vca") == " (VC admins only: ada, root, group leads-a, group ops)"
    assert access.admins_for("bob", "vca") == " (VC admins only)"
    assert access.admins_for("carol", "vca", ["team-a"]).startswith(" (VC admins only: ada")


def test_an_empty_access_lets_nobody_but_the_server(access):
    empty = Access()
    assert not empty.is_admin("root") and not empty.known("root")
    assert empty.is_admin("srv", [SERVER_ACCOUNT])
    assert empty.vcs_of("root") == []


def test_access_cannot_be_changed_after_it_is_built(access):
    """Built once per spec: a door holding it cannot make itself an admin."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        access.admins = frozenset({"eve"})
    assert not access.is_admin("eve")
