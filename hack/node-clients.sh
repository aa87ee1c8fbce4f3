#!/usr/bin/env bash
# Provide the pinned grpc-js xDS client (examples/grpc-node/package.json and
# package-lock.json) for the tests that run real proxyless Node clients.
#
# Usage: bash hack/node-clients.sh DIR
#
# The packages come from the npm registry with `npm ci`, once per lock file,
# into ${RINGXDS_CACHE:-$HOME/.cache/ringxds}/node/<lock hash>/, which
# survives fresh clones. DIR (the clone's git-ignored .testbin) receives a
# node_modules symlink, so a warm run takes well under a second. A flock
# serialises concurrent runs.
set -euo pipefail

log() { printf 'node-clients: %s\n' "$*" >&2; }
die() {
	printf 'node-clients: error: %s\n' "$*" >&2
	exit 1
}

[ $# -eq 1 ] || die "usage: $0 DIR"
out=$1
src=$(cd "$(dirname "$0")/../examples/grpc-node" && pwd)

command -v node >/dev/null || die "node is not on PATH; install Node.js 18 or later (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is not on PATH; install it beside node"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: grpc-js-xds needs 18 or later"

key=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
cache_root=${RINGXDS_CACHE:-$HOME/.cache/ringxds}/node
cache=$cache_root/$key
mkdir -p "$cache_root" "$out"

exec 9>"$cache_root/.lock"
if ! flock -n 9; then
	log "another run holds $cache_root/.lock; waiting for it"
	flock 9
fi

if [ ! -f "$cache/.ready" ]; then
	log "installing $(node -p "Object.entries(require('$src/package.json').dependencies).map(([n, v]) => n + '@' + v).join(' ')") into $cache"
	rm -rf "$cache"
	mkdir -p "$cache"
	cp "$src/package.json" "$src/package-lock.json" "$cache/"
	# --ignore-scripts: the only install script (protobufjs postinstall)
	# checks versions; nothing here needs to run at install time.
	(cd "$cache" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
		die "npm ci failed in $cache (does this machine reach the npm registry?)"
	touch "$cache/.ready"
fi
ln -sfn "$cache/node_modules" "$out/node_modules"
log "ready: $out/node_modules -> grpc-js-xds $(node -p "require('$cache/node_modules/@grpc/grpc-js-xds/package.json').version")"
