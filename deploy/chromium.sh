#!/usr/bin/env bash
# A headless browser for the dashboard's browser test (node/ui_browser_test.go):
# Debian's chromium package, installed with apt-get when it is missing. Prints the
# binary's path on stdout (the test reads it from TROUPE_TEST_CHROMIUM); what it
# does goes to stderr.
#
#   export TROUPE_TEST_CHROMIUM="$(deploy/chromium.sh)"
set -euo pipefail

for name in chromium chromium-browser; do
	if path="$(command -v "$name")"; then
		echo "$path"
		exit 0
	fi
done
echo "chromium: apt-get install chromium" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends chromium >&2
command -v chromium
