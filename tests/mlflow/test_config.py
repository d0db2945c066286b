"""--backend-config checking: every bad key or value is refused, naming the key."""
import json
import subprocess
import sys

import pytest

from hived.mlflow_plugin.config import BackendConfigError, parse_config

MLFLOW_ADDED = {"ENV_MANAGER": None, "SYNCHRONOUS": False, "DOCKER_ARGS": {},
                "STORAGE_DIR": None, "build_image": False, "docker_auth": None}


def test_minimal_config_gets_defaults_and_keeps_mlflow_keys():
    cfg = parse_config({"vc": "team-a", **MLFLOW_ADDED}, environ={})
    assert (cfg.vc, cfg.gpus, cfg.pods, cfg.priority, cfg.detach) == ("team-a", 1, 1, "be", False)
    assert cfg.mlflow["SYNCHRONOUS"] is False
    body = cfg.job_payload("python x.py", {"A": "1"}, "/w", "n")
    assert body == {"vc": "team-a", "command": "python x.py", "job_class": "be", "pods": 1,
                    "env": {"A": "1"}, "workdir": "/w", "name": "n", "gpus": 1}


def test_full_config_becomes_the_rest_body():
    cfg = parse_config({"vc": "v", "cell": "DGX.NODE", "pods": 2, "affinity": "soft",
                        "grace_period": 30, "priority": "opportunistic", "chain": "DGX",
                        "service_url": "http://127.0.0.1:8888/", "token": "t", "workdir": "/data",
                        "detach": True, "name": "nm", "env": {"X": "y"}, "max_retries": 2,
                        "poll": 0.2}, environ={})
    body = cfg.job_payload("cmd", {"MLFLOW_RUN_ID": "r"}, "/ignored", "default")
    assert body["cell_type"] == "DGX.NODE" and "gpus" not in body
    assert body["job_class"] == "opportunistic" and body["workdir"] == "/data"
    assert body["env"] == {"MLFLOW_RUN_ID": "r", "X": "y"} and body["name"] == "nm"
    assert (body["affinity"], body["grace_period"], body["chain"], body["max_retries"]) == ("soft", 30, "DGX", 2)


def test_json_string_and_file(tmp_path):
    assert parse_config('{"vc": "a", "gpus": 2}', environ={}).gpus == 2
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"vc": "b"}))
    assert parse_config(str(f), environ={}).vc == "b"


def test_vc_from_environment_or_required():
    assert parse_config({}, environ={"HIVED_VC": "envvc"}).vc == "envvc"
    with pytest.raises(BackendConfigError, match="'vc': required"):
        parse_config({}, environ={})


@pytest.mark.parametrize("raw,key,words", [
    ({"vc": "a", "gpu": 1}, "gpu", "unknown key; allowed:"),
    ({"vc": "a", "gpus": -1}, "gpus", "must be >= 1, got -1"),
    ({"vc": "a", "gpus": 0}, "gpus", "must be >= 1, got 0"),
    ({"vc": "a", "gpus": "2"}, "gpus", 'must be an integer, got "2"'),
    ({"vc": "a", "gpus": 1.5}, "gpus", "must be an integer"),
    ({"vc": "a", "pods": 0}, "pods", "must be >= 1"),
    ({"vc": "a", "affinity": "loose"}, "affinity", "must be one of 'hard', 'soft'"),
    ({"vc": "a", "priority": "te"}, "priority", "must be one of 'be', 'opportunistic'"),
    ({"vc": "a", "grace_period": -5}, "grace_period", "must be >= 0"),
    ({"vc": "a", "service_url": "localhost:8888"}, "service_url", "is not valid"),
    ({"vc": "a", "detach": "yes"}, "detach", "must be true or false"),
    ({"vc": "a", "env": {"1BAD": "x"}}, "env", "not a valid environment variable name"),
    ({"vc": "a", "env": {"OK": 3}}, "env.OK", "must be a string"),
    ({"vc": "a", "env": {"MLFLOW_RUN_ID": "x"}}, "env.MLFLOW_RUN_ID", "cannot be overridden"),
    ({"vc": "a", "env": {"HIVED_RESUMED": "1"}}, "env.HIVED_RESUMED", "cannot be overridden"),
    ({"vc": "a", "gpus": 1, "cell": "X"}, "cell", "either 'gpus' or 'cell'"),
    ({"vc": "", "gpus": 1}, "vc", "must not be empty"),
    ({"vc": "a", "poll": 0}, "poll", "must be > 0"),
    ({"vc": "a", "ENV_MANAGER": "conda"}, "--env-manager", "use --env-manager local"),
])
def test_bad_values_name_the_key(raw, key, words):
    with pytest.raises(BackendConfigError) as info:
        parse_config(raw, environ={})
    err = info.value
    assert err.key == key
    assert words in str(err)
    assert str(err).startswith(f"hived backend config: '{key}': ")
    assert "\n" not in str(err)


def test_bad_json_and_missing_file(tmp_path):
    with pytest.raises(BackendConfigError, match="not valid JSON"):
        parse_config("{vc: a}", environ={})
    with pytest.raises(BackendConfigError, match="must be a JSON object"):
        parse_config("[1, 2]", environ={})
    with pytest.raises(BackendConfigError, match="cannot read"):
        parse_config(str(tmp_path / "nope.json"), environ={})


# documents jsonschema must judge exactly as the backend's own small checker does
_AGREEMENT = [
    {"vc": "a"}, {"vc": "a", "gpus": 2.0}, {"vc": "a", "gpus": True}, {"vc": "a", "gpus": 1025},
    {"vc": "a", "pods": 3, "affinity": "hard"}, {"vc": "a", "grace_period": 0.5},
    {"vc": "a", "grace_period": "5"}, {"vc": "a", "poll": 60.5}, {"vc": "a", "poll": 0.01},
    {"vc": "a", "service_url": "https://h:1/x"}, {"vc": "a", "service_url": "ftp://h"},
    {"vc": "a", "env": {"A_1": "x"}}, {"vc": "a", "env": {"A-1": "x"}}, {"vc": "a", "env": {"A": None}},
    {"vc": "a", "env": []}, {"vc": "a", "name": "x" * 201}, {"vc": "a", "workdir": ""},
    {"vc": "a", "cell": "N", "chain": "C"}, {"vc": "a", "max_retries": -1}, {"vc": "a", "bogus": 1},
    {"vc": "a", "detach": False, "token": "t", "checkpoint_dir": "/c", "priority": "opportunistic"},
]


@pytest.mark.parametrize("doc", _AGREEMENT)
def test_own_checker_agrees_with_jsonschema(doc):
    import jsonschema  # installed with jupyter-server; only this test needs it

    from hived.mlflow_plugin.config import SCHEMA
    from hived.mlflow_plugin.schema_check import first_error
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    valid = jsonschema.Draft202012Validator(SCHEMA).is_valid(doc)
    assert (first_error(SCHEMA, doc) is None) == valid, doc


def test_integral_float_becomes_int_and_import_is_light():
    assert parse_config({"vc": "a", "gpus": 2.0}, environ={}).gpus == 2
    probe = subprocess.run([sys.executable, "-c", "import sys, hived.mlflow_plugin.backend; "
                            "print('jsonschema' in sys.modules)"], capture_output=True, text=True)
    assert probe.stdout.strip() == "False", probe.stderr   # its import alone costs seconds


def test_job_body_is_the_one_every_door_builds(tmp_path):
    """The MLflow body equals `hived submit`'s for the same options (one builder, one spelling)."""
    from hived.cli.cmd_submit import payload_of
    from hived.cli.main import build_parser
    cfg = parse_config({"vc": "a", "cell_type": "DGX.NODE", "pods": 2, "grace_period": 5, "max_retries": 1,
                        "affinity": "soft", "env": {"X": "1"}}, environ={})
    body = cfg.job_payload("python train.py", {}, str(tmp_path), "run-1")
    cli = payload_of(build_parser().parse_args(
        ["submit", "--vc", "a", "--be", "--cell-type", "DGX.NODE", "--pods", "2", "--grace", "5", "--retries", "1",
         "--affinity", "soft", "--env", "X=1", "--name", "run-1", "--workdir", str(tmp_path), "--",
         "python train.py"]))
    assert body == cli
    with pytest.raises(BackendConfigError, match="'cell_type'"):
        parse_config({"vc": "a", "cell": "X", "cell_type": "X"}, environ={})


def test_job_control_keys_reach_the_job_body_as_hived_submit_sends_them():
    from hived.mlflow_plugin.config import parse_config
    cfg = parse_config({"vc": "ml", "time_limit": 3600, "after": "j3, j4", "cpus": 4, "memory_gb": 32})
    body = cfg.job_payload("python train.py", {}, "/srv/proj", "run")
    assert (body["time_limit"], body["after"], body["cpus"], body["memory_gb"]) == (3600, ["j3", "j4"], 4, 32)
    with pytest.raises(Exception, match="'time_limit': must be >= 1, got 0"):
        parse_config({"vc": "ml", "time_limit": 0})
