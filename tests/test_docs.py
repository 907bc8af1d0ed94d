"""Documentation that is generated from the code stays in step with it."""

import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_recipe_reference_is_current():
    result = subprocess.run(
        [sys.executable, "scripts/recipe_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
