"""The test folders' opt-in to running jobs as the server's account (never suite-wide)."""


def server_account_unless_marked(request, monkeypatch) -> None:
    """HIVED_JOB_ACCOUNT=server for this test unless it is marked ``default_job_account``.

    Run as root (as CI does), hived runs each VC's jobs under a uid of their own, which
    must reach the job's python and folders. This suite's python may live under /root
    (a pyenv, 0700) and its jobs write into pytest's temporary folders
    (/tmp/pytest-of-root, 0700): those uids reach neither, and such jobs are refused at
    submission (tests/service/test_local_reach.py shows the refusal users get)."""
    if request.node.get_closest_marker("default_job_account") is None:
        monkeypatch.setenv("HIVED_JOB_ACCOUNT", "server")
