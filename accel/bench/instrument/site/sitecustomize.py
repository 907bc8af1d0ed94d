"""Loaded by Python before a benched script's first line (this folder is first on the trial's PYTHONPATH): starts
accel's instrument once the script imports torch, records the script's argparse parsers as it parses its command
line, then hands over to the sitecustomize this one shadows, if any."""

import os

if os.environ.get("ACCEL_TRIAL") or os.environ.get("ACCEL_PROFILE"):
    from accel.bench.instrument import backups, import_watch, parsers

    backups.start()  # first: the script's every change to a file is seen (the room's fallback)
    import_watch.start()
    parsers.watch()
    import_watch.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))
