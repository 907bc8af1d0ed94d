"""The packages, for setuptools: accel's own, and the shipped recipes and presets, which live at the repository's
top (recipes/, configs/, where a user of the repository looks first) and ship inside the wheel as accel/recipes
and accel/configs, so `accel train quickstart` works by name after `pip install` (accel/config/shipped.py).
Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

SHIPPED = {"accel.recipes": "recipes", "accel.configs": "configs"}

setup(packages=find_packages(include=["accel", "accel.*"]) + list(SHIPPED), package_dir=SHIPPED)
