#!/usr/bin/env bash
# Installs the official MCP SDKs that cmd/node/mcpsdk_test.go drives the node's MCP
# server with, as users do, into the deploy cache, once per version:
#   py: the Python SDK (mcp on PyPI) in a virtual environment; prints its python
#       (the tests read it from TROUPE_MCP_PY);
#   ts: the TypeScript SDK (@modelcontextprotocol/sdk on npm); prints the folder
#       whose node_modules holds it (the tests read it from TROUPE_MCP_TS).
# Usage: export TROUPE_MCP_PY="$(deploy/mcp-sdk.sh py)"
#        export TROUPE_MCP_TS="$(deploy/mcp-sdk.sh ts)"
# MCP_PY_VERSION and MCP_TS_VERSION pick other versions (defaults 2.3.0 and 1.32.2).
set -euo pipefail

cache="${TROUPE_DEPLOY_HOME:-${HOME:-/tmp}/.cache/troupe-deploy}"
case "${1:-}" in
py)
	version="${MCP_PY_VERSION:-2.3.0}"
	dir="$cache/mcp-py-$version"
	stamp="$dir/.installed"
	if [ ! -f "$stamp" ] || [ ! -x "$dir/bin/python" ]; then
		command -v python3 >/dev/null 2>&1 || { echo "mcp-sdk.sh: python3 not found" >&2; exit 1; }
		rm -rf "$dir"
		python3 -m venv "$dir" >&2
		"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$version" >&2
		"$dir/bin/python" -c 'import mcp.client.session, mcp.client.stdio, mcp.client.streamable_http' >&2
		touch "$stamp"
	fi
	echo "$dir/bin/python"
	;;
ts)
	version="${MCP_TS_VERSION:-1.32.2}"
	dir="$cache/mcp-ts"
	stamp="$dir/.installed-$version"
	if [ ! -f "$stamp" ]; then
		command -v npm >/dev/null 2>&1 || { echo "mcp-sdk.sh: npm not found" >&2; exit 1; }
		mkdir -p "$dir"
		npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/sdk@$version" >&2
		touch "$stamp"
	fi
	echo "$dir"
	;;
*)
	echo "usage: mcp-sdk.sh py|ts" >&2
	exit 2
	;;
esac
