"""A kept-alive connection survives a restart of the service."""

from __future__ import annotations

from mlstream import Client

from conftest import TOKENS, Server


def test_a_request_after_a_restart_opens_a_new_connection(binary):
    first = Server(binary)
    try:
        client = Client(first.url, TOKENS["admin"])
        client.create_job({"name": "r", "kind": "logreg", "input": "r"})
        kept = client._local.conn
        assert kept is not None and kept.sock is not None  # kept alive
    finally:
        first.stop()
    # Same port, new process: the kept connection is dead; the request is
    # sent again once on a fresh one.
    second = Server(binary, addr=first.url.removeprefix("http://"))
    try:
        assert client.jobs() == []
        assert client._local.conn is not kept
    finally:
        client.close()
        second.stop()
