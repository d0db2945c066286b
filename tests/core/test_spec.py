"""The spec loader: happy paths, and the corpus of broken specs with their exact refusals."""
import json
from pathlib import Path

import pytest
import yaml

from core_helpers import rack_doc

from hived.core.spec import SpecError, load_spec
from hived.jupyter_ext.cli.main import main as hived_main

HERE = Path(__file__).parent
BROKEN = HERE / "broken_specs"
EXPECTED = yaml.safe_load((BROKEN / "expected.yaml").read_text())
EXAMPLE = HERE.parents[1] / "examples" / "cluster.yaml"


def test_corpus_is_complete():
    files = sorted(p.name for p in BROKEN.glob("*.yaml") if p.name != "expected.yaml")
    assert len(files) >= 30
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_spec_refused_by_api(name):
    with pytest.raises(SpecError) as exc:
        load_spec(BROKEN / name)
    assert str(exc.value) == EXPECTED[name]
    assert str(exc.value) == f"{exc.value.path}: {exc.value.problem}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_spec_refused_by_cli(name, capsys):
    rc = hived_main(["spec", "check", str(BROKEN / name)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"hived spec check: {EXPECTED[name]}"


def test_cli_json_refusal_names_path_and_problem(capsys):
    rc = hived_main(["spec", "check", "--json", str(BROKEN / "17_infeasible_top_level.yaml")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2 and out["ok"] is False and out["where"] == "virtualClusters"
    assert out["error"].startswith("infeasible VC assignment: chain RACK level 3 (NODE)")


def test_cli_missing_file(tmp_path, capsys):
    rc = hived_main(["spec", "check", str(tmp_path / "none.yaml")])
    assert rc == 4
    assert "none.yaml: file not found" in capsys.readouterr().err


def test_cli_check_and_show_example(capsys):
    assert hived_main(["spec", "check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ok - 2 chain(s)" in out and "VC " in out
    assert hived_main(["spec", "check", "--json", str(EXAMPLE)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and len(data["chains"]) == 2 and len(data["vcs"]) == 4
    assert hived_main(["spec", "show", str(EXAMPLE)]) == 0
    shown = capsys.readouterr().out
    assert all(f"VC {vc}:" in shown for vc in data["vcs"])
    assert hived_main(["spec", "show", "--static", "--json", str(EXAMPLE)]) == 0
    views = json.loads(capsys.readouterr().out)
    assert views["binding"] == "static"
    for v in views["vcs"].values():
        assert all(lv["bound"] == lv["total"] for lv in v["levels"])


def test_load_from_dict_text_and_file(tmp_path):
    doc = rack_doc(2, {"A": {"NODE": 2}, "B": {"SOCK": 1, "SW": 2}})
    text = yaml.safe_dump(doc)
    f = tmp_path / "c.yaml"
    f.write_text(text)
    for src in (doc, text, f, str(f)):
        spec = load_spec(src)
        ch = spec.chains["RACK"]
        assert ch.levels == ["GPU", "SW", "SOCK", "NODE", "RACK"]
        assert ch.node_level == 4 and ch.gpus_per_level == [1, 2, 4, 8, 16]
        assert spec.total_gpus == 32
        assert spec.vcs["B"].cells == {("RACK", 3): 1, ("RACK", 2): 2}
        assert spec.level_of("RACK", "RACK.SOCK") == 3 and spec.level_of("RACK", "SW") == 2


def test_defaults_and_extensions():
    doc = rack_doc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    doc["virtualClusters"]["A"].update(users=["alice", "ann"], admins=["lead"], weight=3)
    doc["admins"] = ["root"]
    spec = load_spec(doc)
    assert spec.vcs["A"].users == ["alice", "ann"] and spec.vcs["A"].admins == ["lead"]
    assert spec.vcs["A"].weight == 3 and spec.vcs["B"].weight == 8   # default: the VC's GPUs
    assert spec.admins == ["root"]
    ch = spec.chains["RACK"]
    assert ch.node_cpus == 64 and ch.node_memory_gb == 512             # 8 CPUs / 64 GB per GPU
    doc["physicalCluster"]["cellTypes"]["NODE"] = dict(doc["physicalCluster"]["cellTypes"]["NODE"],
                                                       cpus=96, memoryGB=1024)
    ch = load_spec(doc).chains["RACK"]
    assert (ch.node_cpus, ch.node_memory_gb) == (96, 1024)


def test_addresses_filled_by_index():
    doc = {"physicalCluster": {"cellTypes": {"SW": {"childCellType": "GPU", "childCellNumber": 2},
                                             "NODE": {"childCellType": "SW", "childCellNumber": 2,
                                                      "isNodeLevel": True}},
                               "physicalCells": [{"cellType": "NODE"}, {"cellType": "NODE", "cellAddress": "big"},
                                                 {"cellType": "NODE"}]},
           "virtualClusters": {"A": {"virtualCells": [{"cellType": "NODE.SW", "cellNumber": 6}]}}}
    spec = load_spec(doc)
    assert [c.address for c in spec.chains["NODE"].cells] == ["node-0", "big", "node-1"]
    gpus = [g.gpu_index for sw in spec.chains["NODE"].cells[0].children for g in sw.children]
    assert gpus == [0, 1, 2, 3]


def test_feasibility_counts_higher_reservations():
    # one rack: a 1-rack VC leaves nothing, so even one GPU for another VC is infeasible
    doc = rack_doc(1, {"A": {"RACK": 1}, "B": {"GPU": 1}})
    with pytest.raises(SpecError, match=r"level 1 \(GPU\): VCs reserve 1 GPU cell \(B: 1\), the chain can supply 0"):
        load_spec(doc)
    # but the whole cluster split into mixed levels is fine
    load_spec(rack_doc(1, {"A": {"NODE": 1}, "B": {"SOCK": 1, "SW": 1, "GPU": 2}}))


def test_bad_source_type():
    with pytest.raises(SpecError, match=r"expected a file path, YAML text or a dict, got int"):
        load_spec(42)


def test_unreadable_file_and_missing_action(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(SpecError, match=r"bad.yaml: cannot read the file: 'utf-8' codec can't decode"):
        load_spec(bad)
    assert hived_main(["spec", "check", str(bad)]) == 2
    assert hived_main(["spec", "check", str(tmp_path / "no-extension")]) == 4   # a path, never YAML text
    assert hived_main(["spec"]) == 2
    assert "usage: hived spec" in capsys.readouterr().err
