"""Requests with unusable text are refused at submit, naming the field (issue 13 item 9)."""
import pytest
from engine_helpers import fig2_spec, req

from hived.core.engine import Engine, RequestError


@pytest.fixture
def eng():
    return Engine(fig2_spec(), preemption_policy="none")


@pytest.mark.parametrize("kw,field,words", [
    ({"command": "echo a\x00b"}, "command", "NUL"),
    ({"command": ["python", "-c", "x\x00"]}, "command[2]", "NUL"),
    ({"command": "echo \x1b[2J"}, "command", "control character"),
    ({"name": "ok\x1b[31mred"}, "name", "control character"),
    ({"name": "line\nbreak"}, "name", "control character"),
    ({"name": "\ud800"}, "name", "surrogate"),
    ({"env": {"A\x00": "1"}}, "env key", "NUL"),
    ({"env": {"A=B": "1"}}, "env key", "'='"),
    ({"env": {"A": "x\x00y"}}, "env[A]", "NUL"),
    ({"workdir": "data/run"}, "workdir", "absolute"),
    ({"workdir": "/tmp/\x00x"}, "workdir", "NUL"),
])
def test_bad_text_is_refused_with_the_field(eng, kw, field, words):
    with pytest.raises(RequestError) as e:
        eng.submit(req("A", **kw), 0.0)
    msg = str(e.value)
    assert msg.startswith(field) and words in msg and "\n" not in msg
    assert eng.jobs() == []


def test_ordinary_scripts_pass(eng):
    eng.submit(req("A", command="for i in 1 2; do\n\techo $i\r\ndone", name="train ü",
                   env={"X": "multi\nline"}, workdir="/srv/x"), 0.0)
    assert len(eng.jobs()) == 1


@pytest.mark.parametrize("value,words", [
    ("x" * 200_000 + "\x1b", "control character '\\x1b' at position 200000"),
    ("ok\ud800\x00", "lone surrogate '\\ud800' at position 2"),
    ("ok\x00\ud800", "NUL character at position 2"),
    ("a\tb\x7f", "control character '\\x7f' at position 3"),
])
def test_the_first_bad_character_is_named_with_its_position(eng, value, words):
    """The check scans a large value (an env of 190 KB) as one search: the first bad
    character of any kind is the one named, with its position."""
    with pytest.raises(RequestError) as e:
        eng.submit(req("A", env={"BIG": value}), 0.0)
    assert str(e.value).startswith("env[BIG]") and words in str(e.value)
    assert eng.jobs() == []
