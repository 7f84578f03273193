"""Fixtures: the real mlstream binary, built once and served on a loopback port.

The server runs with tokens (MLSTREAM_TOKENS) so that the auth paths are
real; ``client`` holds the admin token. Set MLSTREAM_BIN to test a binary
built elsewhere.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import threading
import uuid
from typing import List

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))

from mlstream import Client  # noqa: E402

TOKENS = {
    "admin": "admin-" + uuid.uuid4().hex,
    "read": "read-" + uuid.uuid4().hex,
    "ingest": "ingest-" + uuid.uuid4().hex,
}
SERVING = re.compile(r'msg="mlstream serving" addr=(\S+)')


class Server:
    """A running mlstream serve; its log is kept for failure reports."""

    def __init__(self, binary: pathlib.Path, addr: str = "127.0.0.1:0"):
        env = dict(os.environ, MLSTREAM_TOKENS=",".join(f"{s}:{t}" for s, t in TOKENS.items()))
        env.pop("MLSTREAM_URL", None)
        env.pop("MLSTREAM_TOKEN", None)
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--addr", addr, "--data", "", "--partitions", "2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
        self.log: List[str] = []
        found = threading.Event()
        self.url = ""

        def drain() -> None:
            # Reading the log to its end keeps the server from blocking on a
            # full pipe.
            for line in self.proc.stderr:
                self.log.append(line)
                m = SERVING.search(line)
                if m and not found.is_set():
                    self.url = "http://" + m.group(1)
                    found.set()
            found.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not found.wait(60) or not self.url:
            self.stop()
            raise RuntimeError("mlstream did not start:\n" + "".join(self.log))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._drain.join(10)
        self.proc.stderr.close()


@pytest.fixture(scope="session")
def binary(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    if os.environ.get("MLSTREAM_BIN"):
        return pathlib.Path(os.environ["MLSTREAM_BIN"])
    out = tmp_path_factory.mktemp("bin") / "mlstream"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/mlstream"], cwd=ROOT, check=True)
    return out


@pytest.fixture(scope="session")
def server(binary: pathlib.Path):
    srv = Server(binary)
    yield srv
    srv.stop()


@pytest.fixture
def make_client(server: Server):
    """make_client(scope or None, **options): a client of the server with
    that scope's token (None: no token), closed after the test."""
    made = []

    def make(scope="admin", url=None, **kw) -> Client:
        c = Client(url or server.url, TOKENS.get(scope, scope), **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def client(make_client) -> Client:
    return make_client("admin")


@pytest.fixture
def unique() -> str:
    """A fresh name for a job or stream: tests share one server."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def logreg(client: Client, unique: str):
    """A fresh logreg job reading a stream of its own."""
    return client.create_job({"name": unique, "kind": "logreg", "input": unique, "partitions": 1})


def eventually(read, ok, timeout: float = 30.0):
    """Polls read() until ok(value), with a deadline: queries see a job's
    state as last published, shortly after `processed` moves."""
    from mlstream.client import _poll

    return _poll(read, ok, timeout, lambda v: f"last value: {v!r}")
