#!/usr/bin/env bash
# Provide kube-apiserver, etcd and kubectl for the Kubernetes integration tests.
#
# Usage: KUBE_VERSION=v1.37.2 bash hack/testbin.sh DIR
#
# No prebuilt Kubernetes binaries can be downloaded on our machines, so
# kube-apiserver is built from the Go module proxy in a scratch module (never
# the project's go.mod). A cold build takes about 20 minutes on 2 cores, so the
# result is cached machine-wide, keyed by version, under
# ${RINGXDS_CACHE:-$HOME/.cache/ringxds}/testbin/<version>/ and survives fresh
# clones. DIR (the clone's git-ignored .testbin) only receives symlinks, so a
# warm run takes about a second. A flock serialises concurrent runs so that two
# clones starting at once build only once.
set -euo pipefail

log() { printf 'testbin: %s\n' "$*" >&2; }
die() {
	printf 'testbin: error: %s\n' "$*" >&2
	exit 1
}

[ $# -eq 1 ] || die "usage: KUBE_VERSION=vX.Y.Z $0 DIR"
out=$1
version=${KUBE_VERSION:-v1.37.2}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "KUBE_VERSION must look like v1.37.2, got '$version'"
minor=${BASH_REMATCH[1]}
patch=${BASH_REMATCH[2]}
# Staging modules (k8s.io/api, client-go, ...) are published as v0.<minor>.<patch>.
staging_version="v0.${minor}.${patch}"

command -v go >/dev/null || die "go is not on PATH"

cache_root=${RINGXDS_CACHE:-$HOME/.cache/ringxds}/testbin
cache=$cache_root/$version
mkdir -p "$cache" "$out"

# has_version BIN: true when BIN exists and reports exactly $version. A binary
# built without the version ldflags reports v0.0.0-master, which kubectl
# rejects, so it must not be accepted from the cache either.
has_version() {
	[ -x "$1" ] && "$1" --version 2>/dev/null | grep -qx "Kubernetes $version"
}

# Serialise everything below: the build, the apt install and the links.
exec 9>"$cache_root/.lock-$version"
if ! flock -n 9; then
	log "another run holds $cache_root/.lock-$version; waiting for it"
	flock 9
fi

# --- scratch module -----------------------------------------------------------
scratch=$cache/src
prepare_scratch() {
	if [ -f "$scratch/go.sum" ] && [ -f "$scratch/.ready" ]; then
		return
	fi
	log "preparing scratch module in $scratch for k8s.io/kubernetes $version"
	rm -rf "$scratch"
	mkdir -p "$scratch"
	(
		cd "$scratch"
		export GOFLAGS=-mod=mod GOWORK=off
		go mod init ringxds.invalid/testbin >/dev/null 2>&1
		gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
		[ -n "$gomod" ] && [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@$version from the module proxy"
		go mod edit -require="k8s.io/kubernetes@$version"
		# kubernetes requires its staging modules at v0.0.0 and replaces them
		# with local folders; from the proxy each is served at v0.<minor>.<patch>.
		n=0
		while read -r mod; do
			go mod edit -replace="$mod=$mod@$staging_version"
			n=$((n + 1))
		done < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u)
		[ "$n" -gt 0 ] || die "found no k8s.io staging modules in $gomod"
		log "replaced $n staging modules with $staging_version"
		cat >tools.go <<-'EOF'
			//go:build tools

			// Package tools pins the commands built from this scratch module.
			package tools

			import (
				_ "k8s.io/kubernetes/cmd/kube-apiserver"
				_ "k8s.io/kubernetes/cmd/kubectl"
			)
		EOF
		log "resolving dependencies (go mod tidy, about 20 s)"
		go mod tidy
	) || die "preparing the scratch module failed"
	touch "$scratch/.ready"
}

# build_cmd NAME: build k8s.io/kubernetes/cmd/NAME into the cache.
build_cmd() {
	local name=$1
	prepare_scratch
	log "building $name $version (cold: about 20 minutes on 2 cores; warm: about 20 s)"
	local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	(
		cd "$scratch"
		export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
		nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp" "k8s.io/kubernetes/cmd/$name"
	) || die "building $name failed"
	mv -f "$cache/$name.tmp" "$cache/$name"
}

# --- kube-apiserver -----------------------------------------------------------
if has_version "$cache/kube-apiserver"; then
	log "kube-apiserver $version cached at $cache/kube-apiserver"
else
	build_cmd kube-apiserver
	has_version "$cache/kube-apiserver" || die "built kube-apiserver does not report $version: $("$cache/kube-apiserver" --version 2>&1 || true)"
fi

# --- etcd ---------------------------------------------------------------------
etcd_bin=$(command -v etcd || true)
if [ -z "$etcd_bin" ]; then
	log "etcd not found; installing Debian's etcd-server"
	command -v apt-get >/dev/null || die "etcd is missing and apt-get is not available; install etcd and retry"
	if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
	$sudo apt-get update -qq || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >/dev/null || die "apt-get install etcd-server failed"
	etcd_bin=$(command -v etcd || true)
	[ -n "$etcd_bin" ] || die "etcd-server installed but etcd is not on PATH"
fi
log "etcd: $etcd_bin ($("$etcd_bin" --version 2>/dev/null | head -n1))"

# --- kubectl ------------------------------------------------------------------
kubectl_bin=""
if [ -x /usr/bin/kubectl ]; then
	kubectl_bin=/usr/bin/kubectl
elif [ -x "$cache/kubectl" ]; then
	kubectl_bin=$cache/kubectl
else
	build_cmd kubectl
	kubectl_bin=$cache/kubectl
fi
log "kubectl: $kubectl_bin"

# --- links --------------------------------------------------------------------
ln -sfn "$cache/kube-apiserver" "$out/kube-apiserver"
ln -sfn "$etcd_bin" "$out/etcd"
ln -sfn "$kubectl_bin" "$out/kubectl"
log "ready: $out -> $("$out/kube-apiserver" --version)"
