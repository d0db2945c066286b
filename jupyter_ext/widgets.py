"""The dashboards, for notebooks::

    from hived.jupyter_ext.widgets import ClusterDashboard, VCDashboard
    ClusterDashboard()          # every VC you may see, the cluster picture, admin actions
    VCDashboard("research")     # one VC, for its members

They connect like ``HivedClient()`` (the notebook's own Jupyter server, or
``$HIVED_URL``/``$HIVED_TOKEN``); pass ``client=`` to choose.
"""
from .widgets_dash import ClusterDashboard, VCDashboard
from .widgets_job import JobStatusWidget

__all__ = ["ClusterDashboard", "VCDashboard", "JobStatusWidget"]
