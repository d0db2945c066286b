"""--backend-config checking: every bad key or value is refused, naming the key."""
import json

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
    ({"vc": "a", "gpus": -1}, "gpus", "must be >= 0, got -1"),
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
