#!/usr/bin/env bash
# Installs the A2A JavaScript SDK (@a2a-js/sdk, the client the node's A2A test drives
# the node with: node/a2ajs_test.go) from npm into the deploy cache, once per version,
# and prints the folder whose node_modules holds it (the tests read it from
# TROUPE_A2A_JS). Usage: export TROUPE_A2A_JS="$(deploy/a2a-js.sh)"
set -euo pipefail

version="${A2A_JS_VERSION:-1.3.0}"
dir="${TROUPE_DEPLOY_HOME:-${HOME:-/tmp}/.cache/troupe-deploy}/a2a-js"
stamp="$dir/.installed-$version"
if [ ! -f "$stamp" ]; then
	command -v npm >/dev/null 2>&1 || { echo "a2a-js.sh: npm not found" >&2; exit 1; }
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@a2a-js/sdk@$version" >&2
	touch "$stamp"
fi
echo "$dir"
