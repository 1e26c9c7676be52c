#!/usr/bin/env bash
# Prints the path of a Chromium that runs headless, for the tests that
# drive a real browser (the status page's, statuspage_browser_test.go).
# $OPENETL_CHROMIUM names one to use instead. Otherwise Debian's chromium
# package (with fonts-dejavu-core, so pages have a font to render with) is
# installed when it is missing, through `scripts/servers.sh
# apt` (one apt-get run under the install lock, waiting for a dpkg lock
# another process holds), so it cannot race other apt runs. Idempotent:
# once installed, it installs nothing. Progress goes to stderr; stdout
# carries only the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "${OPENETL_CHROMIUM:-}" ]; then
  [ -x "$OPENETL_CHROMIUM" ] || { echo "chromium.sh: OPENETL_CHROMIUM=$OPENETL_CHROMIUM is not executable" >&2; exit 1; }
  echo "$OPENETL_CHROMIUM"
  exit 0
fi
found() { command -v chromium || command -v chromium-browser; }
if ! found >/dev/null; then
  "$here/servers.sh" apt chromium fonts-dejavu-core
fi
found || { echo "chromium.sh: chromium is not on PATH after installing Debian's chromium" >&2; exit 1; }
