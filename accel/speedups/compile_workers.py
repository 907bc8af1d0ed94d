"""Inductor's compile-worker pools: stopped once a compilation is over (`release_compile_workers`, by `compile` and
the compiled optimizer step), and waited for, or stopped, where a bench or a profile begins its timed steps
(`settle_compile_workers`, `stop_compile_workers`): a pool still starting there would be timed as the run's."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

log = logging.getLogger("accel")

_stopping: list[threading.Thread] = []  # release_compile_workers' threads, until settle_compile_workers


def release_compile_workers() -> None:
    """Stop inductor's compile-worker pools without waiting for them to exit.

    torch's `shutdown_compile_workers` waits for each pool's sidecar process, which first finishes its own start
    (importing torch): 5 s for a pool just started, as it is when the graphs came from a warm cache, 1 s later
    on; the training loop would stall that long. The pools are forgotten here at once, as torch itself does after
    shutting them down (a later compilation starts a pool of its own), and stopped on a thread."""
    if "torch._inductor.async_compile" not in sys.modules:
        return  # nothing compiled with inductor in this process: no pool, and no import of inductor to pay for
    from torch._inductor import async_compile

    pools = list(getattr(async_compile, "_pool_set", ()))
    if not pools:
        return
    if not hasattr(async_compile, "after_fork"):  # a torch without the reset: stop them the blocking way
        async_compile.shutdown_compile_workers()
        return
    async_compile.after_fork()
    if hasattr(async_compile.AsyncCompile, "_ready_future"):
        async_compile.AsyncCompile._ready_future = None  # the warm-up of a stopped pool
    stopping = threading.Thread(target=_shut_down, args=(pools,), name="accel-compile-workers", daemon=True)
    stopping.start()
    _stopping.append(stopping)


def settle_compile_workers(timeout: float = 60.0) -> float:
    """Wait until the pools released so far have exited; returns the seconds waited.

    A bench calls this at the end of its warm-up. Inductor starts a pool in every process that compiles, even
    when every graph comes from a warm cache, and its workers' start (each imports torch) still runs after the
    release: it halved the compiled ResNet preset's throughput over its first seconds on an H200's 16-core host
    (docs/benchmarks.md, 2026-11-28). That is start-up, to be counted with compilation, not in the timed steps."""
    start = time.perf_counter()
    while _stopping:
        stopping = _stopping.pop()
        stopping.join(timeout)
        if stopping.is_alive():
            log.warning(
                "compile: inductor's compile workers did not exit within %.0f s; the steps timed next may share the "
                "CPU with them.",
                timeout,
            )
    return time.perf_counter() - start


def stop_compile_workers() -> float:
    """Stop inductor's pools now and wait for them to exit; returns the seconds it took. At the end of a bench
    trial's warm-up in a loop whose compilation accel does not own (an unchanged script's torch.compile, a loop's
    own), whose pool would otherwise start, or idle, through the timed steps."""
    release_compile_workers()
    return settle_compile_workers()


def _shut_down(pools: list[Any]) -> None:
    for pool in pools:
        pool.shutdown()
