#!/usr/bin/env bash
# Creates .venv in the repository root and installs torchneuron (editable) with its
# test and example dependencies. Idempotent: a second run installs nothing unless
# pyproject.toml or this script changed, or a pinned package is missing.
# `setup.sh test` also installs what only the tests need outside Python: Debian's
# chromium, in which tests/test_sweep_report.py loads the sweep report.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=.venv/bin/python
# torch and torchvision: the releases pip takes from this machine image's local disk.
PINS=(torch==2.14.1 torchvision==0.29.1 jax==0.10.2)

if [ ! -x "$PY" ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
fi

# The stamp records what the last successful install was made from; the version
# check catches packages removed or replaced by hand since.
stamp=.venv/.torchneuron-setup
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
installed_ok() {
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || return 1
    "$PY" - "${PINS[@]}" <<'PYEOF'
import importlib.metadata as md
import sys

for pin in sys.argv[1:] + ["torchneuron"]:
    name, _, version = pin.partition("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if version and have.split("+")[0] != version:
        sys.exit(1)
PYEOF
}

if installed_ok; then
    echo "setup: .venv is up to date"
else
    echo "setup: installing ${PINS[*]} and torchneuron[test] into .venv"
    "$PY" -m pip install --quiet "${PINS[@]}" -e ".[test]"
    echo "$want" > "$stamp"
fi

if [ "${1:-}" = test ]; then
    bash scripts/install_chromium.sh
fi
