"""The pydantic base shared by every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, values are checked on assignment too. No setting takes NaN or
    infinity (`optim.lr: .inf` would pass a `gt=0` bound and train on nothing but NaN)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
