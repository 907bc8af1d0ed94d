"""Loaded by Python before a benched or profiled script's first line (this folder is first on the trial's
PYTHONPATH): the trial's side joins the process (accel/trial), torch-free until the script imports torch. It keeps
the user's files (`backups`, the room's fallback), starts accel's instrument once the script imports torch, records
the script's argparse parsers as it parses its command line, has every accel.Engine the script makes join the
trial or the profile (`dispatch`), then hands over to the sitecustomize this one shadows, if any."""

import os

if os.environ.get("ACCEL_TRIAL") or os.environ.get("ACCEL_PROFILE"):
    from accel.trial import backups, dispatch
    from accel.trial.instrument import import_watch, parsers

    backups.start()  # first: the script's every change to a file is seen (the room's fallback)
    import_watch.start()
    parsers.watch()
    dispatch.register()
    import_watch.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))
