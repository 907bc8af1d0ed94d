"""The Kubernetes manifest `accel k8s` writes: a Kubeflow Trainer `TrainJob` (trainer.kubeflow.org/v1alpha1).

The TrainJob names a training runtime installed in the cluster (Kubeflow Trainer's `torch-distributed`
ClusterTrainingRuntime by default), which starts one pod per node and gives each the rendezvous through torchrun's
variables: PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT. Each pod runs `accel train --nproc G` with
them, on a persistent volume that holds the run directory, so a restarted pod resumes from its checkpoint. Kubernetes
stops a pod with SIGTERM: accel saves on it (accel/runs/signals.py) within the pod's grace period.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from . import Job, dns_name, start_or_resume

API_VERSION, KIND = "trainer.kubeflow.org/v1alpha1", "TrainJob"

NODE = "node"  # the runtime's training job and its container: what the overrides target
MOUNT = PurePosixPath("/runs")  # where the run directories' volume is mounted in every pod
VOLUME = "runs"
RENDEZVOUS = (
    '--nnodes "$PET_NNODES" --node-rank "$PET_NODE_RANK" --master-addr "$PET_MASTER_ADDR" '
    '--master-port "$PET_MASTER_PORT"'
)


def run_dir(name: str) -> str:
    """A run directory's path in the pods: on the mounted volume."""
    return str(MOUNT / PurePosixPath(name).name)


def manifest(job: Job, image: str, claim: str, runtime: str) -> dict[str, Any]:
    """The TrainJob for `job`: `image` has accel installed, `claim` is a PersistentVolumeClaim every node can
    mount (ReadWriteMany) for the run directory, which `job.out` must be under (run_dir)."""
    command = f'{start_or_resume(job)}exec accel "${{train[@]}}" {RENDEZVOUS}\n'
    gpus = {"nvidia.com/gpu": job.gpus_per_node}  # copied below: the same dict twice would be a YAML alias
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": dns_name(PurePosixPath(job.out).name)},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {
                "image": image,
                "command": ["bash", "-c", command],
                "numNodes": job.nodes,
                "numProcPerNode": job.gpus_per_node,
                "resourcesPerNode": {"limits": dict(gpus), "requests": dict(gpus)},
            },
            "podTemplateOverrides": [
                {
                    "targetJobs": [{"name": NODE}],
                    "spec": {
                        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}],
                        "containers": [{"name": NODE, "volumeMounts": [{"name": VOLUME, "mountPath": str(MOUNT)}]}],
                    },
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the pods' script) as literal blocks, readable as the shell script they are."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def dump(resource: dict[str, Any]) -> str:
    return yaml.dump(resource, Dumper=_Dumper, sort_keys=False, width=120)
