"""Every ```python snippet of README.md runs, against a real server, in a
fresh interpreter: a snippet with tests in it through pytest (with the
package's holdfast_server fixture, found through its pytest11 entry point),
every other one as a program, which must exit 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.M | re.S)


def test_the_readme_has_its_snippets() -> None:
    text = "\n".join(SNIPPETS)
    for shown in (
        "bearer_token=",
        "on_lease_event=",
        "run_if_free(",
        "run_scheduled(",
        "holdfast_server",
        "semaphore(",
        "rwlock(",
    ):
        assert shown in text, f"README shows no {shown}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(snippet: str, addr: str, server_binary: str, tmp_path: Path) -> None:
    hostport = addr.removeprefix("http://")
    code = snippet.replace("http://127.0.0.1:7410", addr).replace("127.0.0.1:7410", hostport)
    env = {**os.environ, "HOLDFAST_BIN": server_binary}
    env.pop("HOLDFAST_TOKEN", None)
    if "def test_" in code:
        (tmp_path / "test_snippet.py").write_text(code)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "test_snippet.py",
        ]
    else:
        cmd = [sys.executable, "-c", code]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
