"""The spec loader: happy paths, and the corpus of broken specs with their exact refusals."""
import json
import sys
from pathlib import Path

import pytest
import yaml
from core_helpers import rack_doc

from hived.cli.main import main as hived_main
from hived.core.spec import SpecError, load_spec

HERE = Path(__file__).parent
BROKEN = HERE / "broken_specs"
EXPECTED = yaml.safe_load((BROKEN / "expected.yaml").read_text())
EXAMPLE = HERE.parents[1] / "examples" / "cluster.yaml"


def test_corpus_is_complete():
    files = sorted(p.name for p in BROKEN.glob("*.yaml") if p.name != "expected.yaml")
    assert len(files) >= 55
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


def _chain_doc(depth: int) -> dict:
    """A chain of ``depth`` cell types above the GPU, each with one child; the node is the top."""
    types = {f"L{k}": {"childCellType": f"L{k - 1}" if k > 1 else "GPU", "childCellNumber": 1}
             for k in range(1, depth + 1)}
    types[f"L{depth}"]["isNodeLevel"] = True
    return {"physicalCluster": {"cellTypes": types, "physicalCells": [{"cellType": f"L{depth}"}]},
            "virtualClusters": {"a": {"virtualCells": [{"cellType": f"L{depth}.L{depth}", "cellNumber": 1}]}}}


@pytest.mark.parametrize("depth", [900, 30_000])
def test_overlong_chain_refused_fast_with_the_limit(depth):
    with pytest.raises(SpecError) as exc:
        load_spec(_chain_doc(depth))
    assert str(exc.value) == (f"physicalCluster.cellTypes.L{depth - 31}.childCellType: chain L{depth} has more "
                              f"than 32 levels (the most a chain may have)")


def _calls_to_refuse(depth: int) -> int:
    """Python and C calls made while ``load_spec`` refuses a chain of ``depth`` types (a count, not a time)."""
    doc = _chain_doc(depth)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        with pytest.raises(SpecError):
            load_spec(doc)
    finally:
        sys.setprofile(None)
    return calls


def test_overlong_chain_refusal_work_grows_linearly():
    """10x the types costs about 10x the calls (the quadratic walk that took 86 s for 30,000 costs 100x)."""
    _calls_to_refuse(50)                          # first use: imports and caches out of the way
    small, big = _calls_to_refuse(3_000), _calls_to_refuse(30_000)
    assert big <= 12 * small, (small, big)


def test_longest_chain_allowed():
    spec = load_spec(_chain_doc(31))                      # 31 types above the GPU: 32 levels
    assert spec.chains["L31"].top_level == 32 and spec.total_gpus == 1


def test_deep_nesting_refused_before_it_exhausts_the_stack():
    doc = rack_doc(1, {"A": {"NODE": 1}})
    inner: dict = {}
    top = inner
    for _ in range(5000):
        nxt: dict = {}
        inner["cellChildren"] = [nxt]
        inner = nxt
    doc["physicalCluster"]["physicalCells"][0]["cellChildren"][0] = top
    with pytest.raises(SpecError, match=r"^physicalCluster\.physicalCells\[0\]\.cellChildren\[0\](\.cellChildren\[0\])+"
                                        r": nested more than 72 levels deep$"):
        load_spec(doc)
    text = "a: " + "[" * 20_000 + "]" * 20_000           # the YAML parser recurses too
    with pytest.raises(SpecError, match=r"^\(yaml\): nested too deeply \(a spec nests at most 72 levels\)$"):
        load_spec(text)


def test_names_have_a_length_limit():
    doc = rack_doc(1, {"v" * 64: {"NODE": 1}})
    with pytest.raises(SpecError, match=r"^virtualClusters: name 'vvvvvvvvvvvvvvvvvvvv'\.\.\. is longer than 63"):
        load_spec(doc)
    load_spec(rack_doc(1, {"v" * 63: {"NODE": 1}}))


def test_max_preemptions_per_vc():
    doc = rack_doc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    doc["virtualClusters"]["A"]["maxPreemptions"] = 3
    doc["virtualClusters"]["B"]["maxPreemptions"] = 0
    spec = load_spec(doc)
    assert spec.vcs["A"].max_preemptions == 3 and spec.vcs["B"].max_preemptions == 0
    assert load_spec(rack_doc(1, {"A": {"NODE": 1}})).vcs["A"].max_preemptions is None
    for bad, problem in ((-1, "must be an integer >= 0, got -1"), (1.0, "must be an integer, got 1.0"),
                         ("2", "must be an integer, got '2'"), (True, "must be an integer, got True")):
        doc["virtualClusters"]["A"]["maxPreemptions"] = bad
        with pytest.raises(SpecError) as exc:
            load_spec(doc)
        assert str(exc.value) == f"virtualClusters.A.maxPreemptions: {problem}"


def test_unix_accounts_user_mapping_wins_then_vc():
    text = """
physicalCluster:
  cellTypes: {NODE: {childCellType: GPU, childCellNumber: 4, isNodeLevel: true}}
  physicalCells: [{cellType: NODE}, {cellType: NODE}]
virtualClusters:
  vision: {virtualCells: [{cellType: NODE.NODE, cellNumber: 1}], account: svc-vision}
  nlp: {virtualCells: [{cellType: NODE.NODE, cellNumber: 1}]}
accounts: {alice: alice, bob: 1001, carol: 1002:1002, dan: 1000:50}
"""
    spec = load_spec(text)
    assert spec.unix_account("alice", "nlp") == "alice"           # the user's mapping wins
    assert spec.unix_account("bob", "vision") == "1001"           # a bare uid
    assert spec.unix_account("carol", "nlp") == "1002:1002"
    assert spec.unix_account("dan", "nlp") == "1000:50"          # not YAML 1.1's base-60 integer 60050
    assert spec.unix_account("erin", "vision") == "svc-vision"    # else the VC's account
    assert spec.unix_account("erin", "nlp") is None               # else none: the service's own account
    assert spec.unix_account("erin", "no-such-vc") is None
    for bad, where, problem in (
            ("accounts: {alice: 'root; rm'}", "accounts.alice", "'root; rm' is not a Unix account"),
            ("accounts: {alice: -1}", "accounts.alice", "must be an integer >= 0, got -1"),
            ("accounts: {'bob smith': bob}", "accounts", "'bob smith' is not a valid name"),
            ("accounts: {alice: 1.5}", "accounts.alice", "must be a string or an integer, got 1.5")):
        with pytest.raises(SpecError) as exc:
            load_spec(text.replace("accounts: {alice: alice, bob: 1001, carol: 1002:1002, dan: 1000:50}", bad))
        assert exc.value.path == where and exc.value.problem.startswith(problem)


def test_spec_import_does_not_load_jsonschema():
    import subprocess
    import sys
    code = ("import sys, hived.core.spec as s; s.load_spec(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'rfc3987_syntax', 'lark')))")
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_check_shows_preemption_cap_and_accounts(tmp_path, capsys):
    doc = rack_doc(1, {"A": {"NODE": 1}, "B": {"NODE": 1}})
    doc["virtualClusters"]["A"].update(maxPreemptions=2, account="svc-a")
    doc["accounts"] = {"alice": "1001:1001"}
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(doc))
    assert hived_main(["spec", "check", str(f)]) == 0
    out = capsys.readouterr().out
    assert "VC A: 8 GPUs, weight 8: RACK.NODE x1; at most 2 preemptions per job; runs as svc-a" in out
    assert "  Unix accounts: alice -> 1001:1001" in out
    assert hived_main(["spec", "check", "--json", str(f)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vcs"]["A"]["max_preemptions"] == 2 and data["vcs"]["B"]["max_preemptions"] is None
    assert data["vcs"]["A"]["account"] == "svc-a" and data["accounts"] == {"alice": "1001:1001"}
