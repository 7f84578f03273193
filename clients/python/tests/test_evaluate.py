"""progressive_val_score against the server's own metrics."""

from __future__ import annotations

import io
import json

import pytest

from mlstream import MlstreamError
from mlstream.evaluate import progressive_val_score

from conftest import ROOT


def cancer():
    with open(ROOT / "benchmarks" / "data" / "breast_cancer.ndjson") as f:
        for line in f:
            row = json.loads(line)
            yield row["features"], row["label"]


def test_progressive_val_score_on_breast_cancer(logreg):
    out = io.StringIO()
    metrics = progressive_val_score(cancer(), logreg, print_every=200, file=out)
    assert metrics["count"] == 569
    assert 0.8 <= metrics["accuracy"] <= 1.0
    assert metrics == logreg.metrics()["all"]
    lines = out.getvalue().splitlines()
    assert [line.split("]")[0] for line in lines] == ["[200", "[400"]
    assert all("Accuracy: " in line and "ROCAUC" in line for line in lines)


def test_progressive_val_score_needs_a_logreg_job(client, unique):
    job = client.create_job({"name": unique, "kind": "distinct", "input": unique, "params": {"field": "key"}})
    with pytest.raises(MlstreamError, match="only logreg"):
        progressive_val_score(cancer(), job)
    with pytest.raises(ValueError):
        progressive_val_score(cancer(), job, print_every=-1)
