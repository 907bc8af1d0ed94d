"""Loaded by Python before a benched or profiled script's first line (this folder is first on the trial's
PYTHONPATH): the trial's side joins the process (accel/trial/join.py), torch-free until the script imports torch,
then hands over to the sitecustomize this one shadows, if any (in a trial's zygote too, which joins no trial itself
and forks the processes that do)."""

import os

from accel.trial import join
from accel.trial.instrument import import_watch

if join.asked():
    join.join()
import_watch.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))
