#!/usr/bin/env bash
# Installs Debian's chromium package, which tests/test_sweep_report.py uses to load the
# sweep report in a headless browser. Idempotent: does nothing when chromium is present.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO=sudo
fi
echo "install_chromium: installing Debian's chromium package"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
