#!/usr/bin/env bash
# Installs the A2A Python SDK (a2a-sdk on PyPI, the client node/a2apy_test.go drives
# the node with) into a virtual environment in the deploy cache, once per version,
# and prints the environment's python (the tests read it from TROUPE_A2A_PY, and
# the 0.3.x one from TROUPE_A2A_PY03).
# The client needs nothing beyond the package's own dependencies (httpx, protobuf,
# json-rpc, pydantic...; not the http-server or grpc extras).
# Usage: export TROUPE_A2A_PY="$(deploy/a2a-py.sh)"
#        export TROUPE_A2A_PY03="$(A2A_PY_VERSION=0.3.26 deploy/a2a-py.sh)"
# A2A_PY_VERSION picks another version (default 1.3.0, which speaks A2A 1.0 and,
# from a 0.3 card, 0.3).
set -euo pipefail

version="${A2A_PY_VERSION:-1.3.0}"
dir="${TROUPE_DEPLOY_HOME:-${HOME:-/tmp}/.cache/troupe-deploy}/a2a-py-$version"
stamp="$dir/.installed"
if [ ! -f "$stamp" ] || [ ! -x "$dir/bin/python" ]; then
	command -v python3 >/dev/null 2>&1 || { echo "a2a-py.sh: python3 not found" >&2; exit 1; }
	rm -rf "$dir"
	python3 -m venv "$dir" >&2
	"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "a2a-sdk==$version" >&2
	"$dir/bin/python" -c 'import a2a.client' >&2
	touch "$stamp"
fi
echo "$dir/bin/python"
