"""Every call of the client against the real server."""

from __future__ import annotations

import json
import pathlib

import pytest

import mlstream
from mlstream import (
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    MlstreamError,
    NotFound,
    Unauthorized,
    UnsupportedMediaType,
)

from conftest import ROOT, TOKENS, eventually

CANCER = ROOT / "benchmarks" / "data" / "breast_cancer.ndjson"


def cancer_rows(n=None):
    with open(CANCER) as f:
        rows = [json.loads(line) for line in f]
    return rows[:n] if n else rows


def test_create_job_from_dict_json_and_yaml(client, unique):
    job = client.create_job({"kind": "logreg", "input": unique, "partitions": 1}, name=unique)
    assert job.name == unique and job.input == unique
    assert job.spec["queue_size"] == 65536  # the server's default, filled in
    # The same spec again, as JSON text, is the same job (200).
    same = client.create_job(json.dumps({"name": unique, "kind": "logreg", "input": unique, "partitions": 1}))
    assert same.spec["name"] == unique
    yaml = pytest.importorskip("yaml")
    assert yaml
    job2 = client.create_job(f"name: {unique}y\nkind: distinct\ninput: {unique}\nparams: {{field: key}}\n")
    assert job2.spec["kind"] == "distinct"


def test_create_job_from_a_file(client, unique, tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": unique, "kind": "logreg", "input": unique}))
    assert client.create_job(pathlib.Path(path)).spec["input"] == unique


def test_create_job_errors_carry_the_field(client, unique):
    with pytest.raises(BadRequest) as exc:
        client.create_job({"name": unique, "kind": "logreg", "input": unique, "params": {"hash_bits": 99}})
    assert exc.value.status == 400
    assert exc.value.field == "params.hash_bits"
    assert "hash_bits" in exc.value.error and "params.hash_bits" in str(exc.value)
    client.create_job({"name": unique, "kind": "logreg", "input": unique})
    with pytest.raises(Conflict):
        client.create_job({"name": unique, "kind": "logreg", "input": unique + "other"})
    with pytest.raises(ValueError, match="name"):
        client.create_job({"kind": "logreg", "input": unique})
    with pytest.raises(ValueError, match="one job spec"):
        client.create_job({"jobs": [{"name": unique}]})


def test_rescale_moves_the_state_and_refuses_a_bad_count(client, unique):
    job = client.create_job({"name": unique, "kind": "heavy_hitters", "input": unique, "partitions": 2,
                             "params": {"field": "item"}})
    client.post_events(unique, [{"item": "a"}, {"item": "a"}, {"item": "b"}])
    job.wait_processed(3)
    st = job.rescale(4)
    assert st["elastic"]["partitions"] == 4
    assert st["elastic"]["last"][-1]["from"] == 2 and st["elastic"]["last"][-1]["to"] == 4
    assert job.wait_processed(3)["topk"]["total"] == 3
    with pytest.raises(BadRequest) as exc:
        job.rescale(0)
    assert exc.value.field == "partitions"


def test_jobs_delete_and_health(client, logreg):
    assert client.health()
    assert logreg.name in {j["name"] for j in client.jobs()}
    logreg.delete()
    with pytest.raises(NotFound) as exc:
        logreg.status()
    assert "no job" in exc.value.error


def test_learn_one_predict_one_and_metrics(logreg):
    for row in cancer_rows(100):
        logreg.learn_one(row["features"], row["label"], key=row["key"])
    st = logreg.wait_processed(100)
    assert st["processed"] == 100
    p = logreg.predict_proba_one(cancer_rows(1)[0]["features"])
    assert set(p) == {False, True}
    assert abs(p[False] + p[True] - 1) < 1e-9 and 0 < p[True] < 1
    assert p[1] == p[True]  # River-style {0: .., 1: ..} lookups work
    assert logreg.predict_one(cancer_rows(1)[0]["features"]) == (p[True] >= 0.5)
    m = logreg.metrics()
    assert set(m) == {"all", "recent"}
    assert 0 < m["all"]["count"] <= 100 and 0 <= m["all"]["accuracy"] <= 1


def test_learn_many_lists_pairs_and_keys(logreg):
    rows = cancer_rows(300)
    X = [r["features"] for r in rows[:150]]
    y = [r["label"] for r in rows[:150]]
    assert logreg.learn_many(X, y, batch_size=40) == 150
    pairs = ((r["features"], bool(r["label"])) for r in rows[150:])
    assert logreg.learn_many(pairs, keys=[r["key"] for r in rows[150:]]) == 150
    logreg.wait_processed(300)
    probas = logreg.predict_proba_many([r["features"] for r in rows[:10]])
    assert len(probas) == 10 and all(0 < p[True] < 1 for p in probas)
    assert logreg.predict_many([r["features"] for r in rows[:10]]) == [p[True] >= 0.5 for p in probas]


def test_learn_many_and_predict_many_with_pandas(logreg):
    pd = pytest.importorskip("pandas")
    rows = cancer_rows(200)
    X = pd.DataFrame([r["features"] for r in rows])
    X.iloc[0, 0] = float("nan")  # a missing cell is a missing feature
    y = pd.Series([r["label"] for r in rows])
    assert logreg.learn_many(X, y) == 200
    logreg.wait_processed(200)
    proba = logreg.predict_proba_many(X.iloc[:5])
    assert list(proba.columns) == [False, True]
    assert list(proba.index) == list(X.index[:5])
    assert ((proba[True] > 0) & (proba[True] < 1)).all()
    assert list(logreg.predict_many(X.iloc[:5])) == list(proba[True] >= 0.5)
    with pytest.raises(ValueError, match="labels"):
        logreg.learn_many(X)


def test_learn_many_error_names_line_and_field(logreg):
    rows = [({"a": 1}, 1), ({"a": 2}, 0), ({"a": 3}, 7), ({"a": 4}, 1)]
    with pytest.raises(BadRequest) as exc:
        logreg.learn_many(rows)
    assert (exc.value.line, exc.value.field) == (3, "label")
    assert "line 3" in str(exc.value) and "'label'" in str(exc.value)
    with pytest.raises(BadRequest) as exc:
        logreg.learn_one({"a": 1, "nested": {"b": 2}}, 1)
    assert exc.value.line == 1 and exc.value.field.startswith("features")
    assert (exc.value.accepted, exc.value.index) == (0, 0)
    # Across batches: the earlier ones stay accepted, and index locates the row.
    rows = [({"a": i}, 7 if i == 6 else 1) for i in range(10)]
    with pytest.raises(BadRequest) as exc:
        logreg.learn_many(rows, batch_size=4)
    assert (exc.value.line, exc.value.accepted, exc.value.index) == (3, 4, 6)
    assert logreg.status()["accepted"] == 4  # the first batch; the others refused whole


def test_content_type_refused_with_its_field(client, logreg):
    with pytest.raises(UnsupportedMediaType) as exc:
        client.request("POST", f"/v1/streams/{logreg.input}/events", b'{"label":1,"features":{"a":1}}',
                       content_type="text/plain")
    assert exc.value.status == 415 and exc.value.field == "Content-Type"


def test_model_topk_distinct_matches(client, unique, logreg):
    rows = cancer_rows(50)
    logreg.learn_many([r["features"] for r in rows], [r["label"] for r in rows])
    logreg.wait_processed(50)
    model = logreg.model(weights=True, limit=5)
    assert model["nonzero_weights"] > 0 and 0 < len(model["weights"]) <= 5
    with pytest.raises(BadRequest) as exc:
        logreg.topk()
    assert "topk" in exc.value.error  # a logreg job has no such query

    stream = unique + "s"
    hh = client.create_job({"name": unique + "h", "kind": "heavy_hitters", "input": stream, "partitions": 1,
                            "params": {"field": "key", "k": 3}})
    dc = client.create_job({"name": unique + "d", "kind": "distinct", "input": stream, "partitions": 1,
                            "params": {"field": "key"}})
    events = [{"key": k} for k in ["a"] * 50 + ["b"] * 30 + ["c"] * 10 + [f"x{i}" for i in range(20)]]
    assert client.send(stream, events, batch_size=25) == 110
    top = eventually(lambda: hh.topk(k=2, window="all"), lambda t: t["total"] == 110)
    assert [i["key"] for i in top["items"]] == ["a", "b"]
    assert top["items"][0]["lower"] <= 50 <= top["items"][0]["upper"]
    d = eventually(lambda: dc.distinct(window="all"), lambda d: round(d["estimate"]) == 23)
    assert d["lower"] <= 23 <= d["upper"]
    with pytest.raises(BadRequest) as exc:
        dc.distinct(window="yesterday")
    assert exc.value.field == "window"

    jn = client.create_job({"name": unique + "j", "kind": "join", "left": unique + "L", "right": unique + "R",
                            "partitions": 1, "params": {"on": "ad", "within": "10s"}})
    with pytest.raises(MlstreamError, match="left"):
        jn.learn_one({"a": 1}, 1)
    client.send(unique + "L", [{"ad": "a1", "ts": 1000}, {"ad": "a2", "ts": 1000}])
    client.send(unique + "R", [{"ad": "a1", "ts": 2000}])
    m = eventually(lambda: jn.matches(limit=5, window="all"), lambda m: m["seen"] == 3)
    assert m["matches"] == 1 and m["recent"][0]["key"] == "a1"


def test_delayed_labels(logreg, make_client):
    rows = cancer_rows(40)
    # Predictions held by id; their labels come later, and the job learns
    # from the held features, scoring the probabilities it served (0.5).
    ps = [logreg.predict_proba_one(r["features"], id=f"r{i}")[True] for i, r in enumerate(rows[:20])]
    assert ps == [0.5] * 20
    proba = logreg.predict_proba_many([r["features"] for r in rows[20:]], ids=[f"r{i}" for i in range(20, 40)])
    assert len(proba) == 20
    eventually(logreg.labels, lambda s: s["pending"] == 40 and s["held"] == 40)
    logreg.label("r0", rows[0]["label"])
    assert logreg.label_many((f"r{i}", r["label"]) for i, r in enumerate(rows) if i > 0) == 39
    logreg.label("nobody", 1)
    s = eventually(logreg.labels, lambda s: s["joined"] == 40 and s["unknown"] == 1)
    assert s["pending"] == 0 and s["ttl_ms"] == 3600_000
    m = eventually(logreg.metrics, lambda m: m["all"]["count"] == 40)
    assert abs(m["all"]["log_loss"] - 0.6931) < 1e-3  # every label scored the 0.5 served
    with pytest.raises(BadRequest) as exc:
        logreg.label_many([("a", 1), ("b", 7)])
    assert (exc.value.line, exc.value.field, exc.value.index) == (2, "label", 1)
    # Holding takes the ingest scope; a read token may predict without id.
    reader = make_client("read").job(logreg.name)
    reader.predict_proba_one({"a": 1})
    with pytest.raises(Forbidden) as exc:
        reader.predict_proba_one({"a": 1}, id="x")
    assert exc.value.get("scope") == "ingest"


def test_tokens_and_scopes(make_client, logreg):
    with pytest.raises(Unauthorized):
        make_client(None).jobs()
    with pytest.raises(Unauthorized):
        make_client("not-a-token-at-all-1234").jobs()
    reader = make_client("read")
    assert reader.job(logreg.name).status()["name"] == logreg.name
    with pytest.raises(Forbidden) as exc:
        reader.create_job({"name": logreg.name + "r", "kind": "logreg", "input": "x"})
    assert exc.value.get("scope") == "admin"
    ingester = make_client("ingest")
    ingester.job(logreg.name, input=logreg.input).learn_one({"a": 1}, 1)
    with pytest.raises(Forbidden):
        ingester.job(logreg.name).metrics()


def test_token_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("MLSTREAM_URL", server.url)
    monkeypatch.setenv("MLSTREAM_TOKEN", TOKENS["read"])
    with Client() as c:
        assert c.url == server.url and c.token == TOKENS["read"]
        assert isinstance(c.jobs(), list)


def test_bad_arguments():
    with pytest.raises(ValueError):
        Client("ftp://x")
    with pytest.raises(ValueError):
        Client("http://127.0.0.1:1", batch_size=0)
    assert mlstream.__version__
