#!/usr/bin/env bash
# Add pyspark, pandas and pyarrow to the reference's env (scripts/reference_env.sh), so the Spark
# interop test (tests/convert/test_spark.py) can run the reference's dataframe_to_mds. The same
# versions as in our .venv are installed when it has them (pandas' to_dict conversions must match
# for the byte-identity check). Prints the reference env's python path.
set -euo pipefail
cd "$(dirname "$0")/.."
REF=$(bash scripts/reference_env.sh)
PY=${PYTHON:-.venv/bin/python}
SPECS=$("$PY" - <<'PY' 2>/dev/null || echo "pyspark>=3.4 pandas>=2.2,<3 pyarrow>=12"
import importlib.metadata as m
print(' '.join(f'{p}=={m.version(p)}' for p in ('pyspark', 'pandas', 'pyarrow')))
PY
)
if ! "$REF" - "$SPECS" >/dev/null 2>&1 <<'PY'
import importlib.metadata as m, sys
wanted = dict(s.split('==') for s in sys.argv[1].split() if '==' in s)
assert wanted and all(m.version(p) == v for p, v in wanted.items())
PY
then
  # shellcheck disable=SC2086
  "$(dirname "$REF")/pip" install -q --disable-pip-version-check $SPECS >&2
fi
echo "$REF"
