"""accel's instrument: an unchanged training script measured from the outside.

Every trial of `accel bench | tune | profile -- python train.py` runs with accel/trial/site/ first on its
PYTHONPATH, so its `sitecustomize` loads before the script's first line (`python train.py`, `python -m pkg.train`
and torchrun's children alike). It waits for the script to import torch (`import_watch`), then the recorder
(`recorder`) counts and times optimizer steps through torch's own global hooks, counts samples at the trained
model's forward, and writes the same trial record a script's `accel.Engine` writes, then ends the process. A script
that creates an `accel.Engine` is measured by its engine instead (accel/trial/engine_agent.py): the recorder stands
down.
"""
