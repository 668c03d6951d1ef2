#!/usr/bin/env bash
# Install hopper for this user: a virtualenv under ~/.local/share/hopper and
# the `hopper` command linked into ~/.local/bin.
#
#   ./install.sh                 # install (or upgrade) from this checkout
#   ./install.sh --prefix DIR    # DIR/share/hopper/venv and DIR/bin/hopper
#
# Needs Python >= 3.11 with venv (Debian: apt-get install python3-venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${HOME}/.local"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "install.sh: hopper needs Python 3.11 or newer ($PY is $("$PY" -V 2>&1))" >&2; exit 1; }
venv="$prefix/share/hopper/venv"
mkdir -p "$prefix/bin" "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$here"
ln -sf "$venv/bin/hopper" "$prefix/bin/hopper"
echo "installed: $prefix/bin/hopper ($("$prefix/bin/hopper" --version))"
case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on your PATH; add it, or call $prefix/bin/hopper" ;;
esac
