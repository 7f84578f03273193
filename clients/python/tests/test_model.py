"""Model export and import against the real server."""

from __future__ import annotations

import json
import random

import pytest

from mlstream import APIError


def rows(seed: int, n: int):
    r = random.Random(seed)
    X = [{"a": r.random(), "b": r.choice(["x", "y", "z"]), "c": r.random() * 10} for _ in range(n)]
    y = [int(x["a"] + (x["b"] == "x") > 0.9) for x in X]
    return X, y


def test_export_then_import_predicts_the_same(client, unique, tmp_path):
    src = client.create_job({"name": unique + "a", "kind": "logreg", "input": unique + "a", "partitions": 1,
                             "params": {"hash_bits": 14}})
    dst = client.create_job({"name": unique + "b", "kind": "logreg", "input": unique + "b", "partitions": 1,
                             "params": {"hash_bits": 14}})
    X, y = rows(1, 2000)
    src.learn_many(X, y)
    src.wait_processed(2000)
    path = tmp_path / "a.mlsmodel"
    assert src.export_model(path) == path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"MLSMODEL"
    st = dst.import_model(path)
    assert st["name"] == unique + "b"
    probe, _ = rows(2, 500)
    assert src.predict_proba_many(probe) == dst.predict_proba_many(probe)

    readable = tmp_path / "a.json"
    src.export_model(readable, format="json")
    m = json.loads(readable.read_text())
    assert m["format"] == "mlstream-model" and m["params"]["hash_bits"] == 14 and m["updates"] == 2000

    other = client.create_job({"name": unique + "c", "kind": "logreg", "input": unique + "c", "partitions": 1,
                               "params": {"hash_bits": 15}})
    with pytest.raises(APIError) as exc:
        other.import_model(path)
    assert exc.value.status == 400 and exc.value.field == "params.hash_bits"


def test_top_weights_and_explain(client, unique):
    job = client.create_job({"name": unique, "kind": "logreg", "input": unique, "partitions": 1,
                             "params": {"hash_bits": 14}})
    X = [{"good": True} if i % 2 == 0 else {"bad": True} for i in range(1600)]
    y = [1 if i % 2 == 0 else 0 for i in range(1600)]
    job.learn_many(X, y)
    job.wait_processed(1600)
    top = job.top_weights(3)
    by_name = {w["names"][0]["name"]: w["sign"] for w in top if w["names"]}
    assert by_name.get("good") == "+" and by_name.get("bad") == "-"
    e = job.explain_one({"good": True, "n": 2})
    assert [f["name"] for f in e["features"]] == ["good", "n"]
    assert e["p"] == job.predict_proba_one({"good": True, "n": 2})[True]
