#!/usr/bin/python3
"""Export scikit-learn's bundled copies of two UCI data sets as mlstream NDJSON event streams.

Writes, next to this script (or into the directory given as the only argument):

  breast_cancer.ndjson  569 events, 30 numeric features.
                        label = sklearn's target as is: 1 = benign (357), 0 = malignant (212).
  digits.ndjson         1797 events, 64 pixel counts (integers 0..16, an 8x8 image).
                        Binary task: label = 1 if the digit is 5..9 (896), 0 if it is 0..4 (901).

One event per line:
  {"key": "<row index in sklearn's data set>", "label": 0|1, "features": {"<name>": value, ...}}
Feature names are sklearn's, in snake_case ("mean radius" -> "mean_radius"; digits keep
"pixel_<row>_<col>"). Values are unscaled, as shipped. Rows are shuffled with a fixed seed
(Python's random.Random(SEED).shuffle, stable across Python versions) so that a stream is not
sorted by class; the key still names the original row. The output is byte-for-byte reproducible
for a given scikit-learn data file.

Uses only the data files shipped inside scikit-learn (no download). Run it with Debian's
/usr/bin/python3 and python3-sklearn (see export_sklearn.sh).
"""

import json
import os
import random
import re
import sys

from sklearn.datasets import load_breast_cancer, load_digits

SEED = 20260101


def snake(name):
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")


def number(v):
    """A JSON number: integers without a fraction, floats in their shortest exact form."""
    f = float(v)
    return int(f) if f.is_integer() else f


def write(path, names, rows, labels):
    order = list(range(len(rows)))
    random.Random(SEED).shuffle(order)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for i in order:
            event = {
                "key": str(i),
                "label": int(labels[i]),
                "features": {n: number(v) for n, v in zip(names, rows[i])},
            }
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    pos = sum(int(l) for l in labels)
    print(f"{path}: {len(rows)} events, {len(names)} features, label 1: {pos}, label 0: {len(rows) - pos}")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(outdir, exist_ok=True)

    bc = load_breast_cancer()
    # sklearn's target_names are ["malignant", "benign"]: target 1 means benign. Kept as is.
    assert list(bc.target_names) == ["malignant", "benign"], bc.target_names
    write(os.path.join(outdir, "breast_cancer.ndjson"),
          [snake(n) for n in bc.feature_names], bc.data, bc.target)

    dg = load_digits()
    # Balanced binary task: 1 = digit 5..9, 0 = digit 0..4.
    write(os.path.join(outdir, "digits.ndjson"),
          [snake(n) for n in dg.feature_names], dg.data, (dg.target >= 5).astype(int))


if __name__ == "__main__":
    main()
