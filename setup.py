"""Maps the top-level folders onto the one import package ``hived``.

The sub-packages are discovered here so that adding a folder under ``core/``
never needs a change to the packaging.
"""
from setuptools import find_packages, setup

FOLDERS = {
    "hived.core": "core",
    "hived.service": "service",
    "hived.cli": "cli",
    "hived.reports": "reports",
    "hived.jupyter_ext": "jupyter_ext",
    "hived.mlflow_plugin": "mlflow_plugin",
    "hived.k8s": "k8s",
    "hived.kernels": "kernels",
    "hived.testing": "testing",
}

packages = []
for name, folder in FOLDERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(
    packages=packages,
    package_dir=FOLDERS,
    package_data={name: ["*.yaml", "*.json", "**/*.yaml", "**/*.json", "**/*.js", "**/*.css",
                                 "**/data/**/*.csv", "**/data/**/*.gz", "**/data/**/README.md"] for name in FOLDERS},
    data_files=[("etc/jupyter/jupyter_server_config.d",
                 ["jupyter_ext/etc/hived.json", "kernels/etc/hived_kernels.json"])],
)
