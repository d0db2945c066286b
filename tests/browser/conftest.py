"""The browser test' served jobs run as the server's account (the reason: testing/job_account.py)."""
import pytest


@pytest.fixture(autouse=True)
def _job_account(request, monkeypatch):
    from hived.testing.job_account import server_account_unless_marked
    server_account_unless_marked(request, monkeypatch)
