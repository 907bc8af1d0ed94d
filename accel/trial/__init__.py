"""The trial's side: what runs inside the process of a script that `accel bench`, `accel tune` or `accel profile`
measures (`-- python train.py`). The top floor: nothing else in accel imports it; the parent's side (accel/bench,
accel/profile) only names it on a trial's PYTHONPATH (`site/`, whose sitecustomize loads it before the script's
first line) and command line (`room_enter.py`, run as a file).

- `dispatch`: which agent the script's engines join (the profile, the bench's probe or its trial), registered among
  the engine's process observers (accel.engine.process_observers), so the engine imports nothing of this room;
- `requested`: what the bench asked, read from the variables it shares with the parent (accel.engine.trial_variables);
- `engine_agent`: a trial or probe measured by the script's own `accel.Engine`; `engine_profile`: the profile
  window driven by it;
- `instrument/`: a script without an engine, measured from outside through torch's own hooks;
- `backups`, `room_enter`: the child's side of the room that keeps the user's files (accel/bench/isolation.py);
- `files`: the trial's own folder for its frameworks' runs.
"""
