"""hived's Jupyter side: the server extension, the magics, the dashboards.

Imports stay lazy: ``import hived.jupyter_ext`` must not pull in
jupyter-server or IPython (the CLI imports its sub-packages).
"""


def _jupyter_server_extension_points():
    return [{"module": "hived.jupyter_ext"}]


def _load_jupyter_server_extension(serverapp):
    from .extension import load
    load(serverapp)


def _unload_jupyter_server_extension(serverapp):
    from .extension import unload
    unload(serverapp)


def load_ipython_extension(ipython):
    from .magics import load_ipython_extension as load
    load(ipython)


def unload_ipython_extension(ipython):
    from .magics import unload_ipython_extension as unload
    unload(ipython)
