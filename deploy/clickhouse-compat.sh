#!/usr/bin/env bash
# Runs every ClickHouse statement of the event log (eventlog/clickhouse) on a
# current ClickHouse: chdb-core from PyPI, the ClickHouse engine as a Python
# module, in a virtual environment in the deploy cache (installed once per
# version). CI's server is ClickHouse 18.16 (deploy/clickhouse.sh), which the
# package's own tests run on; this checks the other end.
#
# The statements come from the Go code: TestDumpStatements (skipped unless
# TROUPE_CH_COMPAT_DUMP is set) drives the Log over a recording connection and
# writes what it sends: the schema migrations from an empty database (twice, as
# two nodes starting at once apply them), then the appends, claims, reads, session
# listings, fencing, releases, prunes and analytics queries, with their arguments
# bound as literals, and for some reads, listings and reports the number of rows
# they return. deploy/clickhouse-compat.py runs them in order in a chdb session on
# a temporary directory and names each statement that fails, with the server's
# error or the rows it returned. Exits non-zero if any failed.
#
# Usage: deploy/clickhouse-compat.sh
# CHDB_VERSION picks another chdb-core version (default 26.9.0, ClickHouse 26.9).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
version="${CHDB_VERSION:-26.9.0}"
dir="${TROUPE_DEPLOY_HOME:-${HOME:-/tmp}/.cache/troupe-deploy}/chdb-core-$version"
stamp="$dir/.installed"
if [ ! -f "$stamp" ] || [ ! -x "$dir/bin/python" ]; then
	command -v python3 >/dev/null 2>&1 || { echo "clickhouse-compat.sh: python3 not found" >&2; exit 1; }
	echo "clickhouse-compat.sh: installing chdb-core==$version in $dir" >&2
	rm -rf "$dir"
	python3 -m venv "$dir" >&2
	# Without its dependencies (pandas, pyarrow): they serve DataFrame results
	# only, and the check reads results as text.
	"$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "chdb-core==$version" >&2
	"$dir/bin/python" -c 'from chdb import session' >&2
	touch "$stamp"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/troupe-ch-compat.XXXXXX")"
trap 'rm -rf "$work"' EXIT
TROUPE_CH_COMPAT_DUMP="$work/statements.json" go test -count=1 -run '^TestDumpStatements$' ./eventlog/clickhouse/ >&2
"$dir/bin/python" deploy/clickhouse-compat.py "$work/statements.json"
