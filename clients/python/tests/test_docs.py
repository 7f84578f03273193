"""The example of docs/python.md runs and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT, TOKENS

PAGE = ROOT / "docs" / "python.md"


def first_python_block(text: str) -> str:
    m = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert m, "docs/python.md has no ```python block"
    return m.group(1)


def test_docs_example_prints_the_progressive_accuracy(server):
    page = PAGE.read_text()
    code = first_python_block(page)
    assert len(code.strip().splitlines()) <= 10, "the example should stay within 10 lines"
    env = dict(os.environ, MLSTREAM_URL=server.url, MLSTREAM_TOKEN=TOKENS["admin"],
               PYTHONPATH=str(ROOT / "clients" / "python"))
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    m = re.fullmatch(r"progressive accuracy: (\d\.\d{3})\n", run.stdout)
    assert m, f"unexpected output {run.stdout!r}"
    accuracy = float(m.group(1))
    assert 0.8 <= accuracy <= 1.0
    # The page quotes the output exactly: one partition learns the events
    # in order, each predicted before it is learned, so the run is
    # deterministic and any change of the learner shows here.
    stated = re.search(r"It prints `progressive accuracy: (\d\.\d{3})`", page)
    assert stated, "the page no longer states the example's output"
    assert stated.group(1) == m.group(1), f"the page says {stated.group(1)}, the code printed {m.group(1)}"
