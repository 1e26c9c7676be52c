#!/usr/bin/env bash
# Installs the independent readers the tests use to check what was
# written (pyarrow for Parquet, pyiceberg with its SQL catalog for
# Iceberg), into a virtualenv under the cache directory. Idempotent: a
# second run installs nothing. Prints the virtualenv's python.
set -euo pipefail
cache="${OPENETL_CACHE:-$HOME/.cache/openetl}"
venv="$cache/venv"
want_pyarrow=26.0.1
want_pyiceberg=0.12.0
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$cache"
  python3 -m venv "$venv" >&2
fi
have=$("$venv/bin/python" -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null || true)
if [ "$have" != "$want_pyarrow" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "pyarrow==$want_pyarrow" >&2
fi
# pyiceberg reads the tables sink/iceberg writes, over the same SQLite
# catalog; sqlalchemy comes with the sql-sqlite extra. pyarrow stays at
# the version pinned above.
have=$("$venv/bin/python" -c 'import pyiceberg, sqlalchemy; print(pyiceberg.__version__)' 2>/dev/null || true)
if [ "$have" != "$want_pyiceberg" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "pyiceberg[sql-sqlite,pyarrow]==$want_pyiceberg" "pyarrow==$want_pyarrow" >&2
fi
echo "$venv/bin/python"
