"""The package list of the build (the rest of the metadata is in pyproject.toml).

The source tree keeps presets/ and trajectories/ at its top level; they ship inside the package as
engine/presets and engine/trajectories (found there by engine.files.resources), so a wheel or a plain
``pip install .`` has them. find_packages keeps every code package without a list to maintain.
"""
from setuptools import find_packages, setup

DATA_PACKAGES = {"engine.presets": "presets", "engine.trajectories": "trajectories"}

setup(packages=find_packages(include=["engine*", "worldpager_cli*"]) + list(DATA_PACKAGES),
      package_dir=DATA_PACKAGES)
