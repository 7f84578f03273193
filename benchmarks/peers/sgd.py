"""scikit-learn's SGDClassifier(loss="log_loss") on an mlstream event stream,
with progressive validation: each event (or mini-batch) is first predicted
with the current model, then learned. Run by `go run ./benchmarks -sections
peers` (benchmarks/peers.go), which computes accuracy and log loss from the
predictions printed here with the same code as mlstream's.

    /usr/bin/python3 benchmarks/peers/sgd.py FILE.ndjson [--one N] [--batches 100,1000]

FILE holds one event a line in mlstream's format ({"label": 0|1, "features":
{name: number | string | bool}}). Features are vectorised once, before any
timing, with DictVectorizer: a number under name is column name, a string v
is the one-hot column "name=v", true is 1 and false 0, as mlstream hashes
them (but without collisions). The vectoriser sees every feature name up
front; a column only gets a non-zero weight once an event that has it is
learned, so that does not help the learner.

Runs, each from a fresh model with default settings except shuffle=False
(so a mini-batch is learned in stream order) and random_state=0:
  - "as-is": the values as they come;
  - "max-abs": each feature divided by the largest |value| seen so far,
    this event included (what MaxAbsScaler.partial_fit would hold), the
    analogue of mlstream's adaptive per-feature scales; no later event is
    looked at;
  - "log1p-l2" (with --variants): each value x becomes log(1 + x) and each
    event is scaled to unit L2 norm: a per-event transform (nothing is
    learned from other events), the usual one for word counts.
each one event at a time on the first N events (--one; 0 = all) and in
mini-batches of each size in --batches on all events. The time of a run is
its training loop only: slicing, scaling, predict_proba and partial_fit.

Output: JSON lines. The first describes the data and the versions, then
one per run: {"variant", "batch", "events", "seconds", "p": [...]} with p
the predicted probability of label 1 of each event, in order (0.5 before
the first partial_fit).
"""

import argparse
import json
import sys
import time

import numpy as np
import scipy
import scipy.sparse
import sklearn
from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import SGDClassifier


def log1p_l2(X):
    """log(1 + x) of each value, then each row scaled to unit L2 norm."""
    X = X.copy()
    X.data = np.log1p(X.data)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    return scipy.sparse.diags(1 / norms) @ X


def run(X, y, batch, scaled):
    model = SGDClassifier(loss="log_loss", shuffle=False, random_state=0)
    scale = np.zeros(X.shape[1])
    n = X.shape[0]
    p = np.full(n, 0.5)
    fitted = False
    start = time.perf_counter()
    for i in range(0, n, batch):
        xb = X[i : i + batch]  # a copy: scaling it in place is safe
        if scaled:
            np.maximum.at(scale, xb.indices, np.abs(xb.data))
            xb.data /= scale[xb.indices]
        if fitted:
            p[i : i + batch] = model.predict_proba(xb)[:, 1]
        model.partial_fit(xb, y[i : i + batch], classes=[0, 1])
        fitted = True
    return time.perf_counter() - start, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--one", type=int, default=0, help="events learned one at a time (0 = all)")
    ap.add_argument("--batches", default="100,1000", help="mini-batch sizes, comma-separated")
    ap.add_argument("--variants", default="as-is,max-abs", help="as-is, max-abs, log1p-l2, comma-separated")
    args = ap.parse_args()

    start = time.perf_counter()
    with open(args.file) as f:
        events = [json.loads(line) for line in f if line.strip()]
    X = DictVectorizer().fit_transform([e["features"] for e in events]).tocsr()
    X.eliminate_zeros()
    y = np.array([int(e["label"]) for e in events])
    print(json.dumps({"events": len(events), "columns": X.shape[1], "load_seconds": time.perf_counter() - start,
                      "sklearn": sklearn.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
                      "python": sys.version.split()[0]}), flush=True)

    one = args.one if 0 < args.one < len(events) else len(events)
    runs = [(1, one)] + [(int(b), len(events)) for b in args.batches.split(",") if b]
    for variant in args.variants.split(","):
        Xv = log1p_l2(X).tocsr() if variant == "log1p-l2" else X
        for batch, n in runs:
            seconds, p = run(Xv[:n], y[:n], batch, variant == "max-abs")
            print(json.dumps({"variant": variant, "batch": batch, "events": n, "seconds": seconds, "p": p.tolist()}), flush=True)


if __name__ == "__main__":
    main()
