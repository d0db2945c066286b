"""Jupyter kernels that are hived TE jobs: the kernel provisioner, the host a kernel job runs,
and the kernelspecs that name them (docs/kernels.md)."""


def _jupyter_server_extension_points():
    return [{"module": "hived.kernels"}]


def _load_jupyter_server_extension(serverapp):
    """Registers the kernel queue event's schema on the server's event bus at start, so a frontend
    subscribed to ``/api/events/subscribe`` before any kernel started hears it (queue_notice.py)."""
    from .queue_notice import register_schema
    register_schema(serverapp.event_logger)
