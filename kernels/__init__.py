"""Jupyter kernels that are hived TE jobs: the kernel provisioner, the host a kernel job runs,
and the kernelspecs that name them (docs/kernels.md)."""
