"""Root conftest: plugins every test folder may use.

pytest-jupyter's server fixtures (jp_fetch, jp_serverapp, ...) must be
declared here, at the top of the test tree.
"""
import os

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# A hived running as root (as the tests do in CI) runs each VC's jobs under a
# uid of their own by default. The tests' jobs write into pytest's temporary
# folders, which only root may enter (/tmp/pytest-of-root is 0700), so the
# suite opts in to running jobs as the server's account; the local isolation
# tests (tests/service/test_local_isolation.py) set the default back.

