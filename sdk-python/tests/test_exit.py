"""The process of a program that used the SDK exits with status 0.

An earlier HTTP stack aborted the interpreter at exit (SIGABRT, sometimes
SIGSEGV) in a few runs out of a hundred, after the program's work was done
(see holdfast/_transport.py), so this runs many real, short-lived
interpreters, two at a time, and requires every exit status to be 0.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("exit_child.py")
RUNS = {"unlock": 80, "watchdog": 70, "blocking-watchdog": 70}
CHILD_TIMEOUT = 60.0


def run_child(addr: str, scenario: str) -> tuple[str, int, str]:
    try:
        p = subprocess.run(
            [sys.executable, str(CHILD), addr, scenario],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        return scenario, -1, f"no exit within {CHILD_TIMEOUT}s: {e.stderr!r}"
    ok = p.returncode == 0 and p.stdout.strip() == "done"
    return scenario, p.returncode if not ok or p.returncode else 0, p.stderr[-2000:] if not ok else ""


def test_every_short_lived_process_exits_0(addr: str) -> None:
    jobs = [s for s, n in RUNS.items() for _ in range(n)]
    # Two at a time: the machine (and CI) has two cores.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: run_child(addr, s), jobs))
    failed = [r for r in results if r[1] != 0]
    assert len(results) >= 200
    assert not failed, f"{len(failed)} of {len(results)} runs did not exit 0: {failed[:5]}"
