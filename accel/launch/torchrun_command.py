"""How `accel train --nproc N` (and `accel run --nproc N -- python train.py`) starts torchrun: processes,
machines, how they meet, how often they restart.

Two ways to meet: static (`--master-addr/--master-port`, each machine names its own `--node-rank`), or c10d
rendezvous (`--rdzv-endpoint HOST:PORT`, ranks handed out as machines arrive, restarts re-run the rendezvous).
A restarted group re-runs the same command; the ranks see TORCHELASTIC_RESTART_COUNT and continue the run
directory (accel/train/run.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import AccelError

JOIN_TIMEOUT_S = 600  # torchrun's own default for join_timeout


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=None, help="processes on this machine, started by torchrun")
    parser.add_argument("--nnodes", type=int, default=1, help="machines taking part (with --nproc)")
    parser.add_argument("--node-rank", type=int, default=0, help="this machine's index (with --nnodes > 1)")
    parser.add_argument("--master-addr", help="static rendezvous: address of the machine with node rank 0")
    parser.add_argument("--master-port", type=int, help="static rendezvous: free port on the master machine")
    parser.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="c10d rendezvous: where every machine meets (instead of --master-addr/--master-port); needed for "
        "--max-restarts across machines",
    )
    parser.add_argument(
        "--rdzv-id",
        help="c10d rendezvous: the job's name, the same on every machine (default: the --out folder's name)",
    )
    parser.add_argument(
        "--rdzv-timeout",
        type=int,
        default=JOIN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"c10d rendezvous: how long to wait for every machine before giving up (default {JOIN_TIMEOUT_S})",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart every process this many times when one fails; the run continues from its last checkpoint",
    )


@dataclass(frozen=True)
class Launch:
    """The torchrun settings of one machine's `accel train`."""

    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout: int = JOIN_TIMEOUT_S
    max_restarts: int = 0

    @classmethod
    def from_args(cls, args: argparse.Namespace, out: Path | None) -> Launch:
        """`out`: the run directory of `accel train`; None for a user's script (`accel run`), which writes its own."""
        job = (out.name if out is not None else "accel-run") if args.rdzv_endpoint else None
        launch = cls(
            args.nproc,
            args.nnodes,
            args.node_rank,
            args.master_addr,
            args.master_port,
            args.rdzv_endpoint,
            args.rdzv_id or job,
            args.rdzv_timeout,
            args.max_restarts,
        )
        launch.check(out_given=out is None or args.out is not None)
        return launch

    def check(self, out_given: bool) -> None:
        if self.nproc < 1 or self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes or self.max_restarts < 0:
            raise AccelError(
                f"need --nproc >= 1, --nnodes >= 1, 0 <= --node-rank < --nnodes and --max-restarts >= 0; got "
                f"{self.nproc}, {self.nnodes}, {self.node_rank} and {self.max_restarts}."
            )
        if self.rdzv_endpoint and (self.master_addr or self.master_port):
            raise AccelError(
                "--rdzv-endpoint and --master-addr/--master-port are two ways for machines to meet: give one."
            )
        if self.rdzv_endpoint and not _host_port(self.rdzv_endpoint):
            raise AccelError(f"--rdzv-endpoint {self.rdzv_endpoint}: expected HOST:PORT, e.g. 10.0.0.1:29400.")
        if self.rdzv_timeout <= 0:
            raise AccelError(f"--rdzv-timeout {self.rdzv_timeout}: give a whole number of seconds above 0.")
        if self.nnodes > 1 and not out_given:  # each machine would name its own runs/<name>-<timestamp>
            raise AccelError(
                f"--nnodes {self.nnodes}: give --out, the same run directory on every machine (a shared file "
                "system): rank 0 writes it, and every rank reads its checkpoint when resuming or restarting."
            )
        if self.nnodes > 1 and not (self.rdzv_endpoint or self.master_addr):
            raise AccelError(
                f"--nnodes {self.nnodes}: say where the machines meet, with --rdzv-endpoint HOST:PORT (c10d "
                "rendezvous) or --master-addr HOST --master-port PORT (static, with --node-rank)."
            )

    @property
    def checks_run_dir(self) -> bool:
        """Whether this machine checks the run directory before torchrun starts: one machine does, or every rank
        0 on it would race the others' checks (the rank that writes checks again, holding the lock)."""
        return self.nnodes == 1 or self.node_rank == 0

    def torchrun_env(self) -> dict[str, str]:
        """Variables torchrun needs beyond its arguments."""
        if not self.max_restarts:
            return {}
        # the store torchrun's agent shares with the ranks outlives a restart, and the restarted ranks read the
        # dead ones' addresses from it (gloo: "connectFullMesh failed ... Connection refused"; pytorch/pytorch
        # issues 135712 and 167288): without sharing, rank 0 of each attempt hosts a fresh store
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}

    def torchrun_command(self, argv: list[str]) -> list[str]:
        """The torchrun invocation that runs `accel ARGV` in each process."""
        return self._torchrun() + ["-m", "accel.cli", *argv]

    def script_command(self, command: list[str]) -> list[str]:
        """The torchrun invocation that runs a user's `command` (`python train.py ARGS`) as it is in each process."""
        return self._torchrun() + ["--no-python", *command]

    def _torchrun(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "accel.launch.torchrun",
            f"--nproc-per-node={self.nproc}",
            f"--nnodes={self.nnodes}",
        ]
        if self.max_restarts:
            command.append(f"--max-restarts={self.max_restarts}")
        if self.rdzv_endpoint:  # ranks are handed out as machines arrive: torchrun ignores --node-rank here
            return command + [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={self.rdzv_endpoint}",
                f"--rdzv-id={self.rdzv_id}",
                f"--rdzv-conf=join_timeout={self.rdzv_timeout}",
            ]
        if self.nnodes > 1:
            command.append(f"--node-rank={self.node_rank}")
        if self.master_addr:
            command.append(f"--master-addr={self.master_addr}")
        if self.master_port:
            command.append(f"--master-port={self.master_port}")
        elif self.nnodes == 1:
            command.append("--standalone")  # picks a free port: two local runs do not collide
        return command


def _host_port(endpoint: str) -> bool:
    host, _, port = endpoint.rpartition(":")
    return bool(host) and port.isdigit()
