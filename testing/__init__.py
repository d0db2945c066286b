"""Harnesses for hived's own tests and benchmarks: the Kubernetes test API
server (``minikas``), an MLflow tracking server (``mlflow_server``), launchers
that run nothing (``launcher_noop``) and where the shared test assets live
(``shared``). No product module imports this package.
"""
