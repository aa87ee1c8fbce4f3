#!/usr/bin/env bash
# Control plane scale matrix: builds xds-server and xds-loadgen, runs each
# scenario against a freshly spawned server on loopback, and rewrites the
# "## Control plane scale" section of docs/benchmarks.md with the figures,
# the machine and the exact commands.
#
#   hack/bench-scale.sh              # full matrix (about 10 minutes)
#   BENCH_QUICK=1 hack/bench-scale.sh  # small sizes, to check the script
#   BENCH_NO_DOCS=1 hack/bench-scale.sh  # print only, leave the docs alone
#   BENCH_REV=abc1234 ...            # commit to record when run outside a clone
#   BENCH_FROM=/tmp/dir hack/bench-scale.sh  # re-render the docs from a kept run
#
# Every scenario's summary line and log are kept in $BENCH_OUT (default: a
# temporary directory, printed at the end). A scenario that fails to
# converge is recorded as such; the script exits 1 after writing the table.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out=${BENCH_OUT:-$(mktemp -d -t ringxds-bench-XXXXXX)}
mkdir -p "$out/bin"
docs=$root/docs/benchmarks.md

from=${BENCH_FROM:-}
if [[ -z $from ]]; then
	echo "building into $out/bin" >&2
	go build -o "$out/bin/" ./cmd/xds-server ./cmd/xds-loadgen
fi
loadgen=$out/bin/xds-loadgen

base="--clusters 100 --endpoints 10000"
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
	scale=10
else
	scale=1
fi
n() { echo $(($1 / scale)); }

# name | what it shows | flags
scenarios=(
	"propagation-1k|1,000 clients (20% gRPC-like, half the Envoys delta)|--clients $(n 1000) $base --changes 20"
	"propagation-5k|5,000 clients, same mix|--clients $(n 5000) $base --changes 20 --timeout 300s"
	"sotw-1k|1,000 Envoy-like clients, SotW only|--clients $(n 1000) $base --changes 10 --grpc-fraction 0 --delta-fraction 0"
	"delta-1k|1,000 Envoy-like clients, delta only|--clients $(n 1000) $base --changes 10 --grpc-fraction 0 --delta-fraction 1"
	"storm-2k|2,000 clients reconnect after a server restart|--clients $(n 2000) $base --changes 5 --storm"
	"slow-1k|1,000 clients plus 50 that stop reading|--clients $(n 1000) $base --changes 10 --slow-consumers $(n 50) --slow-wait 90s"
)

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo NA; }
kv() { # kv LINE KEY: the value of KEY=... in a summary line
	tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2; exit }'
}

status=0
rows=()
lines=()
load_before=$(loadavg)
[[ -z $from ]] || load_before=$(cat "$from/load_before")
echo "$load_before" >"$out/load_before"
for s in "${scenarios[@]}"; do
	IFS='|' read -r name what flags <<<"$s"
	rc=0
	if [[ -n $from ]]; then
		line=$(cat "$from/$name.line")
		rc=$(cat "$from/$name.rc")
	else
		echo "== $name: xds-loadgen --spawn-server $flags (load $(loadavg))" >&2
		# shellcheck disable=SC2086 # flags are words on purpose
		line=$("$loadgen" --spawn-server --server-bin "$out/bin/xds-server" --log-level warn \
			--file "$out/$name.yaml" --keep-file $flags 2>"$out/$name.log" | tail -n 1) || rc=$?
		echo "$rc" >"$out/$name.rc"
	fi
	echo "$line" | tee "$out/$name.line" >&2
	if [[ $rc != 0 ]]; then
		status=1
	fi
	verdict=ok
	[[ $rc == 0 ]] || verdict="FAILED (exit $rc)"
	extra=""
	case $name in
	storm-*) extra="resynced $(kv "$line" storm_resynced), resync p99 $(kv "$line" storm_resync_p99_ms) ms, max $(kv "$line" storm_resync_max_ms) ms; resources withdrawn $(kv "$line" withdrawn), re-sent unchanged $(kv "$line" unchanged_resources)" ;;
	slow-*) extra="others' p99 $(kv "$line" baseline_p99_ms) -> $(kv "$line" slow_p99_ms) ms ($(kv "$line" slow_p99_change_pct)%), disconnected $(kv "$line" slow_disconnected) after $(kv "$line" slow_disconnect_s) s, max RSS $(kv "$line" slow_max_rss_mb) MB" ;;
	sotw-* | delta-*) extra="EDS bytes per push: SotW $(kv "$line" sotw_eds_bytes_per_push), delta $(kv "$line" delta_eds_bytes_per_push)" ;;
	esac
	heapkey=live_heap_per_client_kb
	[[ -n $(kv "$line" $heapkey) ]] || heapkey=heap_per_client_kb
	rows+=("| $what | $(kv "$line" converged) | $(kv "$line" propagation_p50_ms) | $(kv "$line" propagation_p99_ms) | $(kv "$line" propagation_max_ms) | $(kv "$line" server_change_to_push_ms) / $(kv "$line" server_push_ms) | $(kv "$line" server_cpu_s) / $(kv "$line" loadgen_cpu_s) | $(kv "$line" server_cpu_us_per_response) / $(kv "$line" server_cpu_us_per_response_without_source) ($(kv "$line" source_share)) | $(kv "$line" server_rss_mb) | $(kv "$line" rss_per_client_kb) | $(kv "$line" $heapkey) | $(kv "$line" stack_per_client_kb) | $(kv "$line" bytes_per_change) | $(kv "$line" load1) | $extra | $verdict |")
	lines+=("xds-loadgen --spawn-server $flags" "  $line")
done
load_after=$(loadavg)
[[ -z $from ]] || load_after=$(cat "$from/load_after")
echo "$load_after" >"$out/load_after"

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || echo unknown)
section=$out/section.md
{
	echo "## Control plane scale"
	echo
	echo "Measured by \`hack/bench-scale.sh\` (\`make bench-scale\`): each row spawns a fresh"
	echo "\`xds-server\` on loopback with the default 50 ms file debounce, writes 100"
	echo "clusters with 10,000 endpoints in all, connects the clients (one gRPC"
	echo "connection each, as separate proxies have), then makes one endpoint change"
	echo "(one to three endpoints of one cluster) every 500 ms. Propagation is the time"
	echo "from the start of the file write to the arrival of the EDS response that"
	echo "holds the change, at every client subscribed to that cluster, so it includes"
	echo "the debounce, the reparse of the file, the snapshot build and the fan-out."
	echo "Every EDS response is decoded and checked against the file's history: a"
	echo "client that ever receives older content than it holds fails the run."
	echo
	echo "- machine: $(nproc) cores ($cpu), $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo 2>/dev/null), $(go version | cut -d' ' -f3)"
	echo "- commit ${BENCH_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%d)"
	echo "- load average (1, 5, 15 min) before: $load_before, after: $load_after; the client"
	echo "  simulator shares the machine with the server, so figures on a busy machine"
	echo "  are upper bounds"
	echo
	echo "Server memory per client is above the idle server (file loaded, no client),"
	echo "read 2 s after every client converged, then two forced collections"
	echo "(\`/debug/pprof/heap?gc=1\`) and 5 s for the runtime to return freed pages."
	echo "RSS still holds what the initial full-state responses (about 800 KB of EDS"
	echo "per Envoy-like client) left in gRPC's buffer pools and the runtime's free"
	echo "spans; the live heap and the goroutine stacks are what each client keeps."
	echo "A \`withdrawn\` resource is one the server told a client to drop although the"
	echo "file still held it: a real proxy would have lost that cluster meanwhile."
	echo "Bytes per change is \`ringxds_xds_bytes_sent_total\` over the change phase"
	echo "divided by the number of changes. The server columns split the propagation"
	echo "time: change-to-push is the mean of \`ringxds_change_to_push_seconds\` (first"
	echo "file event to caches updated: debounce, reparse, build, diff and the caches'"
	echo "fan-out to watches), push the mean of \`ringxds_xds_push_seconds\` (build, diff"
	echo "and cache update); the rest is delivery. CPU is what the server and the client"
	echo "simulator each used during the change phase, on the same cores. CPU per"
	echo "response is the server's CPU over the xDS responses it sent in that phase"
	echo "(\`ringxds_xds_pushes_total\`), a figure the machine's load does not change;"
	echo "the second figure leaves out the source's reading of its input"
	echo "(\`ringxds_source_cpu_seconds_total\`, measured on the source's own thread),"
	echo "whose share of the server's CPU is in parentheses."
	echo
	echo "| scenario | converged | p50 ms | p99 ms | max ms | server change-to-push / push ms | CPU s server / tool | server CPU us / response, without source (source share) | server RSS MB | RSS / client KB | live heap / client KB | stack / client KB | bytes / change | load | notes | result |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
	echo
	echo "Targets: p99 <= 250 ms at 1,000 clients and <= 1 s at 5,000; <= 40 KB per"
	echo "connected client; a reconnect storm of 2,000 resynced within 10 s; slow"
	echo "consumers move the others' p99 by < 20% and are eventually disconnected."
	echo
	echo "Commands and summary lines:"
	echo
	printf '    %s\n' "${lines[@]}"
	echo
} >"$section"

if [[ ${BENCH_NO_DOCS:-0} == 1 ]]; then
	cat "$section"
else
	tmp=$docs.tmp
	if [[ -f $docs ]] && grep -q '^## Control plane scale$' "$docs"; then
		# Replace the section up to the next "## " heading, leaving the
		# sections others maintain as they are.
		awk -v f="$section" '
			/^## Control plane scale$/ { while ((getline l < f) > 0) print l; skip = 1; next }
			skip && /^## / { skip = 0 }
			!skip { print }
		' "$docs" >"$tmp"
	else
		{
			if [[ -f $docs ]]; then
				cat "$docs"
			else
				echo "# Benchmarks"
			fi
			echo
			cat "$section"
		} >"$tmp"
	fi
	mv "$tmp" "$docs"
	echo "updated $docs" >&2
fi
echo "logs and summary lines: $out" >&2
exit $status
