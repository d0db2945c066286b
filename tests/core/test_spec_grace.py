"""The per-VC grace bounds in the spec: defaults, and refusals that name the field and the limit."""
from __future__ import annotations

import pytest

from hived.core.spec import DEFAULT_MAX_GRACE, DEFAULT_OPPORTUNISTIC_GRACE, SpecError, load_spec


def _doc(**vc) -> dict:
    return {"physicalCluster": {"cellTypes": {"NODE": {"childCellType": "GPU", "childCellNumber": 4,
                                                       "isNodeLevel": True}},
                                "physicalCells": [{"cellType": "NODE", "cellAddress": "n1"}]},
            "virtualClusters": {"a": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}], **vc}}}


def test_defaults_and_given_values():
    vc = load_spec(_doc()).vcs["a"]
    assert (vc.opportunistic_grace, vc.max_grace) == (DEFAULT_OPPORTUNISTIC_GRACE, DEFAULT_MAX_GRACE) == (30.0, 1200.0)
    vc = load_spec(_doc(opportunisticGrace=0, maxGrace=86400)).vcs["a"]
    assert (vc.opportunistic_grace, vc.max_grace) == (0.0, 86400.0)
    assert load_spec(_doc(maxGrace=2.5)).vcs["a"].max_grace == 2.5


@pytest.mark.parametrize("key", ["opportunisticGrace", "maxGrace"])
@pytest.mark.parametrize("value, words", [
    (-1, "must be a number >= 0, got -1"),
    (86401, "must be at most 86400, got 86401"),
    (True, "must be a number, got True"),
    ("30", "must be a number, got '30'"),
    (float("inf"), "must be a finite number, got inf"),
])
def test_bad_values_are_refused_naming_the_field_and_the_limit(key, value, words):
    with pytest.raises(SpecError) as exc:
        load_spec(_doc(**{key: value}))
    assert str(exc.value) == f"virtualClusters.a.{key}: {words}"
