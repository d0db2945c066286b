import pytest

from hived.core.failures import RETRY, RULES, FailureClass, classify, retry_decision


@pytest.mark.parametrize("code,log,cls", [
    (0, "Traceback (most recent call last)", FailureClass.SUCCESS),
    (1, "RuntimeError: CUDA out of memory. Tried to allocate", FailureClass.OOM),
    (137, "Out of memory: Killed process 1234 (python)", FailureClass.OOM),
    (1, "NCCL error in: ../ProcessGroupNCCL.cpp unhandled system error", FailureClass.INFRA),
    (1, "OSError: [Errno 5] Input/output error", FailureClass.INFRA),
    (1, "ConnectionResetError: Connection reset by peer", FailureClass.INFRA),
    (1, '  File "train.py", line 3\n    print("x"\nSyntaxError: unexpected EOF', FailureClass.USER),
    (1, "ModuleNotFoundError: No module named 'torchh'", FailureClass.USER),
    (1, "FileNotFoundError: [Errno 2] No such file or directory: 'data.csv'", FailureClass.USER),
    (143, "", FailureClass.PREEMPTED),
    (-15, "", FailureClass.PREEMPTED),
    (137, "", FailureClass.LOST),
    (127, "bash: trian.py: command not found", FailureClass.USER),
    (139, "", FailureClass.USER),
    (3, "something odd happened", FailureClass.USER),   # the Philly study (ATC '19) §5: no infrastructure signature
])
def test_classify_table(code, log, cls):
    assert classify(code, log).cls is cls


def test_signature_beats_exit_code_and_rule_is_named():
    c = classify(137, "oom-kill event in cgroup")
    assert c.cls is FailureClass.OOM and c.rule == "cpu-oom" and "out_of_memory" in str(c)
    assert classify(9, "").rule == "no-signature"


def test_every_class_has_a_retry_rule_and_every_rule_a_class():
    assert set(RETRY) == set(FailureClass)
    assert all(isinstance(r.cls, FailureClass) for r in RULES)


def test_classify_rejects_non_int():
    with pytest.raises(TypeError, match="exit_code"):
        classify("1", "")


def test_retry_rules_follow_002():
    assert not retry_decision(FailureClass.USER, 1).retry
    assert retry_decision(FailureClass.USER, 1, max_retries=5).retry      # only when the request asks
    assert not retry_decision(FailureClass.USER, 6, max_retries=5).retry
    d1, d2, d3 = (retry_decision(FailureClass.INFRA, n) for n in (1, 2, 3))
    assert d1.retry and d2.retry and d3.retry
    assert d1.delay == 120 and d2.delay == 240 and d3.delay == 480  # back-off doubles
    assert not retry_decision(FailureClass.INFRA, 4).retry           # cap per job
    assert "cap" in retry_decision(FailureClass.INFRA, 4).reason
    assert retry_decision(FailureClass.INFRA, 2, max_retries=1).retry is False
    assert retry_decision(FailureClass.INFRA, 2, cap=1).retry is False
    big = retry_decision(FailureClass.LOST, 3, max_retries=10)
    assert big.retry and big.delay <= RETRY[FailureClass.LOST].max_delay
    p = retry_decision(FailureClass.PREEMPTED, 100)
    assert p.retry and "not counted" in p.reason


def test_a_user_error_not_retried_says_how_to_ask_for_retries():
    from hived.core.failures import FailureClass, retry_decision
    d = retry_decision(FailureClass.USER, 1)
    assert not d.retry
    assert d.reason == ("user_error: not retried (hived submit --retries N, max_retries in the request, "
                        "asks for retries)")
    assert retry_decision(FailureClass.USER, 1, max_retries=0).reason == "user_error: not retried"
