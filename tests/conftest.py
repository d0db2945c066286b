"""Root conftest: plugins every test folder may use.

pytest-jupyter's server fixtures (jp_fetch, jp_serverapp, ...) must be
declared here, at the top of the test tree.

No setting here changes hived's defaults for the whole suite: the folders whose
jobs cannot run under hived's default job account opt in to the server's
account with ``hived.testing.job_account.server_account_unless_marked`` (see its
docstring), each saying why.
"""
pytest_plugins = ["pytest_jupyter.jupyter_server"]

