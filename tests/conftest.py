"""Root conftest: plugins every test folder may use.

pytest-jupyter's server fixtures (jp_fetch, jp_serverapp, ...) must be
declared here, at the top of the test tree.
"""
pytest_plugins = ["pytest_jupyter.jupyter_server"]
