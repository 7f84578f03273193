#!/usr/bin/env bash
# Regenerates breast_cancer.ndjson and digits.ndjson from scikit-learn's bundled data sets.
# Installs Debian's python3-sklearn when it is missing (needs root and apt), then runs the
# exporter with Debian's /usr/bin/python3 (not a pyenv/venv python, which lacks that package).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=/usr/bin/python3
if ! "$py" -c 'import sklearn' >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends python3-sklearn
fi
exec "$py" "$here/export_sklearn.py" "$@"
