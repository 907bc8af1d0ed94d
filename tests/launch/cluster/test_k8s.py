"""`accel k8s`: the TrainJob manifest parses and fits the TrainJob schema shipped beside this file (trimmed from
Kubeflow Trainer's CRD, trainer.kubeflow.org/v1alpha1; its $comment says from which commit). No cluster here."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from accel.cli import main
from accel.launch.cluster import Job, k8s

SCHEMA = json.loads((Path(__file__).parent / "trainjob-v1alpha1.schema.json").read_text())
KEYWORDS = {"type", "properties", "additionalProperties", "required", "items", "enum", "pattern", "minLength"}
KEYWORDS |= {"maxLength", "anyOf", "$comment"}
TYPES = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}


def violations(value, schema: dict, where: str = "") -> list[str]:
    """The JSON Schema keywords in KEYWORDS, checked (the schema file uses no others: see the test below)."""
    wrong: list[str] = []
    expected = schema.get("type")
    if expected and not (
        isinstance(value, TYPES[expected]) and not (expected == "integer" and isinstance(value, bool))
    ):
        return [f"{where or '/'}: expected {expected}, got {value!r}"]
    if "anyOf" in schema and all(violations(value, option, where) for option in schema["anyOf"]):
        wrong.append(f"{where}: {value!r} fits none of {schema['anyOf']}")
    if "enum" in schema and value not in schema["enum"]:
        wrong.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            wrong.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            wrong.append(f"{where}: length {len(value)} out of bounds")
    if isinstance(value, dict):
        wrong += [f"{where}/{key}: required" for key in schema.get("required", []) if key not in value]
        for key, item in value.items():
            inner = schema.get("properties", {}).get(key, schema.get("additionalProperties", True))
            if inner is False:
                wrong.append(f"{where}/{key}: not a field of this resource")
            elif isinstance(inner, dict):
                wrong += violations(item, inner, f"{where}/{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            wrong += violations(item, schema["items"], f"{where}/{i}")
    return wrong


def keywords(schema) -> set[str]:
    if isinstance(schema, list):
        return set().union(*map(keywords, schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = set(schema) - {"properties"}
    for key, inner in schema.items():
        if key == "properties":
            found |= set().union(*map(keywords, inner.values()))
        elif key in {"items", "additionalProperties", "anyOf"}:
            found |= keywords(inner)
    return found


def job(**changes) -> Job:
    fields = dict(name="tiny", recipe="recipes/tiny.yaml", out=k8s.run_dir("tiny-1"), nodes=2, gpus_per_node=4)
    return Job(**{**fields, **changes})


def test_the_schema_uses_only_the_keywords_the_check_knows():
    assert keywords(SCHEMA) <= KEYWORDS


def test_the_check_catches_a_misspelt_field_a_bad_name_and_a_wrong_type():
    good = k8s.manifest(job(), "registry.example/accel:1", claim="runs", runtime="torch-distributed")
    assert violations(good, SCHEMA) == []
    misspelt = json.loads(json.dumps(good))
    misspelt["spec"]["trainer"]["numProcsPerNode"] = 4
    misspelt["metadata"]["name"] = "Tiny_1"
    misspelt["spec"]["trainer"]["numNodes"] = "2"
    assert len(violations(misspelt, SCHEMA)) == 3


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (2, 8)])
def test_the_written_manifest_parses_and_fits_the_trainjob_schema(tiny, write_recipe, tmp_path, nodes, gpus):
    recipe, written = write_recipe(tiny), tmp_path / "job.yaml"
    argv = ["k8s", str(recipe), "--nodes", str(nodes), "--gpus-per-node", str(gpus), "--image", "reg/accel:1"]
    assert main([*argv, "--out", "Tiny Run", "--manifest", str(written), "--set", "train.epochs=3"]) == 0
    resource = yaml.safe_load(written.read_text())
    assert violations(resource, SCHEMA) == []
    trainer = resource["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (nodes, gpus)
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": gpus}
    override = resource["spec"]["podTemplateOverrides"][0]
    assert override["spec"]["volumes"] == [{"name": "runs", "persistentVolumeClaim": {"claimName": "accel-runs"}}]
    assert override["spec"]["containers"][0]["volumeMounts"] == [{"name": "runs", "mountPath": "/runs"}]
    assert resource["metadata"]["name"] == "tiny-run"
    script = trainer["command"][2]
    for variable in ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"):
        assert f'"${variable}"' in script
    assert "--out '/runs/Tiny Run'" in script and f"--nproc {gpus}" in script and "--set=train.epochs=3" in script


def test_the_pod_script_starts_afresh_and_resumes_once_there_is_a_checkpoint(tmp_path):
    """The script run in bash with `accel` replaced by echo: what a first pod and a restarted one would run."""
    out = tmp_path / "run"
    script = k8s.manifest(job(out=str(out)), "img", claim="c", runtime="r")["spec"]["trainer"]["command"][2]
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "head", "PET_MASTER_PORT": "29400"}

    def ran() -> str:
        shimmed = script.replace("exec accel", "echo accel")
        return subprocess.run(["bash", "-c", shimmed], env=env, capture_output=True, text=True, check=True).stdout

    rendezvous = "--nnodes 2 --node-rank 1 --master-addr head --master-port 29400"
    assert ran().strip() == f"accel train recipes/tiny.yaml --out {out} --nproc 4 {rendezvous}"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.pt").write_bytes(b"")
    assert ran().strip() == f"accel train {out}/recipe.yaml --out {out} --resume --nproc 4 {rendezvous}"
