"""The WebSocket feed as typed messages."""

from __future__ import annotations

import pytest

from mlstream import Forbidden, Unauthorized
from mlstream.messages import Backup, Distinct, Join, Match, Message, Prediction, Recovery, Stats, TopK, parse



def test_subscribe_predictions_misses_nothing(logreg):
    # subscribe() returns once the server has subscribed the connection:
    # events posted right after it all come back as predictions.
    with logreg.subscribe("prediction", timeout=20) as feed:
        rows = [({"a": i % 7, "b": "x" if i % 2 else "y"}, i % 2) for i in range(30)]
        logreg.learn_many(rows, keys=[f"k{i}" for i in range(30)])
        got = [next(feed) for _ in range(30)]
    assert all(isinstance(m, Prediction) for m in got)
    assert sorted(m.key for m in got) == sorted(f"k{i}" for i in range(30))
    for m in got:
        assert m.job == logreg.name and 0 < m.p < 1
        assert m.label == int(m.key[1:]) % 2
        assert m.seq > 0 and m.ts > 0 and m.model_version >= 0
        assert m.raw["type"] == "prediction"


def test_subscribe_stats_and_iteration_stops_at_close(logreg):
    feed = logreg.subscribe("stats", timeout=20)
    msg = next(feed)
    assert isinstance(msg, Stats)
    assert msg.stats["name"] == logreg.name and msg.dropped == 0
    feed.close()
    assert list(feed) == []


def test_subscribe_synopses(client, unique):
    hh = client.create_job({"name": unique + "h", "kind": "heavy_hitters", "input": unique, "partitions": 1,
                            "params": {"field": "key", "k": 2}})
    dc = client.create_job({"name": unique + "d", "kind": "distinct", "input": unique, "partitions": 1,
                            "params": {"field": "key"}})
    with client.subscribe([hh.name, dc.name], ["topk", "distinct"], timeout=20) as feed:
        client.send(unique, [{"key": k} for k in "aaabbc"])
        seen = {}
        for msg in feed:
            seen[type(msg)] = msg
            if TopK in seen and Distinct in seen:
                break
    assert seen[TopK].job == hh.name and seen[TopK].topk["items"][0]["key"] == "a"
    assert seen[Distinct].job == dc.name and seen[Distinct].distinct["estimate"] > 0


def test_subscribe_with_a_timeout(logreg):
    with logreg.subscribe("prediction", timeout=0.2) as feed:
        with pytest.raises(TimeoutError):
            next(feed)


def test_subscribe_refusals(make_client, logreg):
    with pytest.raises(Unauthorized):
        make_client(None).job(logreg.name).subscribe("prediction")
    with pytest.raises(Forbidden):
        make_client("ingest").job(logreg.name).subscribe("prediction")
    with make_client("read").job(logreg.name).subscribe("stats", timeout=20) as feed:
        assert isinstance(next(feed), Stats)
    with pytest.raises(ValueError, match="unknown message type"):
        logreg.subscribe("predictions")


def test_parse_keeps_unknown_types_and_fields():
    m = parse({"type": "novel", "job": "j", "x": 1})
    assert type(m) is Message and m.raw["x"] == 1
    p = parse({"type": "prediction", "job": "j", "key": "k", "p": 0.5, "new_field": True})
    assert isinstance(p, Prediction) and p.label is None and p.raw["new_field"] is True
    # Fault tolerance's messages (the test server runs without --data), as the README shows them.
    b = parse({"type": "backup", "job": "spam", "ts": 1, "index": 12, "full": False, "bytes": 48211,
               "divergence": 0.52, "last_seqs": [1200, 1187], "partitions": [0, 1]})
    assert isinstance(b, Backup) and b.index == 12 and b.last_seqs == [1200, 1187] and b.partition is None
    r = parse({"type": "recovery", "job": "spam", "ts": 1, "recovery": {"failures": 1, "lost": 379, "within": True}})
    assert isinstance(r, Recovery) and r.recovery["lost"] == 379


def test_subscribe_join_messages(client, unique):
    jn = client.create_job({"name": unique, "kind": "join", "left": unique + "L", "right": unique + "R",
                            "partitions": 1, "params": {"on": "ad", "within": "10s"}})
    with jn.subscribe("match", "join", timeout=20) as feed:
        client.send(unique + "L", [{"ad": "a1", "ts": 1000}])
        client.send(unique + "R", [{"ad": "a1", "ts": 2000}])
        seen = {}
        for msg in feed:
            seen[type(msg)] = msg
            if Match in seen and Join in seen:
                break
    assert seen[Match].match["key"] == "a1"
    assert (seen[Match].match["left_ts"], seen[Match].match["right_ts"]) == (1000, 2000)
    assert seen[Join].job == unique and "matches" in seen[Join].join


def test_a_loop_that_stops_early_closes_cleanly(server, logreg):
    # The README's loop, to the end of the interpreter: a break leaves no
    # pending task nor an event loop closed under one.
    import os
    import subprocess
    import sys

    from conftest import ROOT, TOKENS

    script = (
        "import threading\n"
        "from mlstream import Client\n"
        f"job = Client().job({logreg.name!r})\n"
        "done = threading.Event()\n"
        "def post():\n"
        "    while not done.wait(0.2):\n"  # until the feed, subscribed meanwhile, sees one
        "        job.learn_one({'a': 1}, 1, key='k1')\n"
        "poster = threading.Thread(target=post)\n"
        "poster.start()\n"
        "for msg in job.subscribe('prediction'):\n"
        "    print(msg.key, msg.p > 0, msg.model_version >= 0)\n"
        "    break\n"
        "done.set()\n"
        "poster.join()\n"
    )
    env = dict(os.environ, MLSTREAM_URL=server.url, MLSTREAM_TOKEN=TOKENS["admin"],
               PYTHONPATH=str(ROOT / "clients" / "python"), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("True True\n")
    assert out.stderr == ""
