#!/usr/bin/env bash
# Control plane scale matrix: builds xds-server and xds-loadgen, times the
# file source's reparse, runs each scenario against freshly spawned servers
# on loopback, and rewrites the "## Control plane scale" section of
# docs/benchmarks.md with the figures, the targets they meet or miss, the
# machine and the exact commands.
#
#   hack/bench-scale.sh              # full matrix (about 12 minutes)
#   BENCH_QUICK=1 hack/bench-scale.sh  # a tenth of the clients, to check the script
#   BENCH_NO_DOCS=1 hack/bench-scale.sh  # print only, leave the docs alone
#   BENCH_REV=abc1234 ...            # commit to record when run outside a clone
#   BENCH_FROM=/tmp/dir hack/bench-scale.sh  # re-render the docs from a kept run
#
# Every scenario's summary line and log are kept in $BENCH_OUT (default: a
# temporary directory, printed at the end). A scenario that fails to
# converge, or whose replicas disagree on a version, is recorded as such;
# the script exits 1 after writing the tables. A missed target is a
# measurement, not a failure.
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
quick=${BENCH_QUICK:-0}
# A kept run is re-rendered at the sizes it ran with.
[[ -z $from || ! -f $from/quick ]] || quick=$(cat "$from/quick")
echo "$quick" >"$out/quick"
if [[ $quick == 1 ]]; then
	scale=10
else
	scale=1
fi
n() { echo $(($1 / scale)); }

# name | what it shows | flags
scenarios=(
	"propagation-1k|1,000 clients (20% gRPC-like, half the Envoys delta)|--clients $(n 1000) $base --changes 20"
	"propagation-5k|5,000 clients, same mix|--clients $(n 5000) $base --changes 20 --timeout 300s"
	"propagation-10k|10,000 clients, same mix|--clients $(n 10000) $base --changes 20 --timeout 900s"
	"sotw-1k|1,000 Envoy-like clients, SotW only|--clients $(n 1000) $base --changes 10 --grpc-fraction 0 --delta-fraction 0"
	"delta-1k|1,000 Envoy-like clients, delta only|--clients $(n 1000) $base --changes 10 --grpc-fraction 0 --delta-fraction 1"
	"storm-5k|5,000 clients reconnect after a server restart|--clients $(n 5000) $base --changes 5 --storm --timeout 300s"
	"slow-1k|1,000 clients plus 50 that stop reading|--clients $(n 1000) $base --changes 10 --slow-consumers $(n 50) --slow-wait 90s"
	"replicas-2k|2,000 clients over two replicas, 1,000 each, same mix|--clients $(n 2000) $base --changes 20 --replicas 2 --timeout 300s"
)
# The largest row is where the client simulator may bind rather than the
# server: its own CPU profile is kept to show where its time went.
profiled=propagation-10k

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo NA; }
kv() { # kv LINE KEY: the value of KEY=... in a summary line
	tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2; exit }'
}
isnum() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
le() { awk -v v="$1" -v l="$2" 'BEGIN { exit !(v + 0 <= l + 0) }'; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }
join() { # join WORD...: the words separated by commas
	local IFS=,
	sed 's/,/, /g' <<<"$*"
}
commas() { sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<<"$1"; }
# all_in FRACTION: "n/n", everyone
all_in() { [[ $1 == */* && ${1%/*} == "${1#*/}" ]]; }

# The reparse target is timed on the source alone, before any server runs.
reparse_bench() {
	if [[ -n $from ]]; then
		cat "$from/reparse.txt" 2>/dev/null || true
	elif grep -q '^func BenchmarkFileReload(' internal/watch/*_test.go 2>/dev/null; then
		echo "== reparse: BenchmarkFileReload/one-cluster (load $(loadavg))" >&2
		go test -run '^$' -bench '^BenchmarkFileReload$/^one-cluster$' -benchtime 20x -count 5 ./internal/watch/ 2>&1 || true
	fi
}
reparse_out=$(reparse_bench)
printf '%s\n' "$reparse_out" >"$out/reparse.txt"
# median ns/op over the counted runs, in ms
reparse_ms=$(awk '/^BenchmarkFileReload\/one-cluster/ { for (i = 1; i < NF; i++) if ($(i + 1) == "ns/op") print $i }' <<<"$reparse_out" |
	sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", v[int((NR + 1) / 2)] / 1e6; else print "NA" }')

status=0
rows=()
lines=()
names=()
declare -A L RC
load_before=$(loadavg)
[[ -z $from ]] || load_before=$(cat "$from/load_before")
echo "$load_before" >"$out/load_before"
for s in "${scenarios[@]}"; do
	IFS='|' read -r name what flags <<<"$s"
	names+=("$name")
	rc=0
	if [[ -n $from ]]; then
		line=$(cat "$from/$name.line" 2>/dev/null || true)
		rc=$(cat "$from/$name.rc" 2>/dev/null || echo "not run")
		[[ ! -f $from/$name.loadgen.pprof ]] || cp "$from/$name.loadgen.pprof" "$out/" 2>/dev/null || true
		[[ ! -f $from/$name.server.pprof ]] || cp "$from/$name.server.pprof" "$out/" 2>/dev/null || true
	else
		prof=()
		[[ $name != "$profiled" ]] || prof=(--loadgen-cpu-profile "$out/$name.loadgen.pprof")
		[[ $name != propagation-1k && $name != "$profiled" ]] || prof+=(--cpu-profile "$out/$name.server.pprof")
		echo "== $name: xds-loadgen --spawn-server $flags (load $(loadavg))" >&2
		# shellcheck disable=SC2086 # flags are words on purpose
		line=$("$loadgen" --spawn-server --server-bin "$out/bin/xds-server" --log-level warn \
			--file "$out/$name.yaml" --keep-file "${prof[@]}" $flags 2>"$out/$name.log" | tail -n 1) || rc=$?
		echo "$rc" >"$out/$name.rc"
	fi
	echo "$line" | tee "$out/$name.line" >&2
	L[$name]=$line
	RC[$name]=$rc
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
	replicas-*) extra="versions identical across replicas: $(kv "$line" replica_versions_identical) ($(kv "$line" replica_versions_compared) contents compared); p50 / p99 ms replica 0 $(kv "$line" replica0_p50_ms) / $(kv "$line" replica0_p99_ms), replica 1 $(kv "$line" replica1_p50_ms) / $(kv "$line" replica1_p99_ms)" ;;
	esac
	heapkey=live_heap_per_client_kb
	[[ -n $(kv "$line" $heapkey) ]] || heapkey=heap_per_client_kb
	rows+=("| $what | $(kv "$line" converged) | $(kv "$line" propagation_p50_ms) | $(kv "$line" propagation_p99_ms) | $(kv "$line" propagation_max_ms) | $(kv "$line" server_change_to_push_ms) / $(kv "$line" server_push_ms) | $(kv "$line" server_cpu_s) / $(kv "$line" loadgen_cpu_s) | $(kv "$line" server_cpu_us_per_response) / $(kv "$line" server_cpu_us_per_response_without_source) ($(kv "$line" source_share)) | $(kv "$line" server_rss_mb) | $(kv "$line" rss_per_client_kb) | $(kv "$line" $heapkey) | $(kv "$line" stack_per_client_kb) | $(kv "$line" bytes_per_change) | $(kv "$line" load1) | $extra | $verdict |")
	lines+=("xds-loadgen --spawn-server $flags" "  $line")
done
load_after=$(loadavg)
[[ -z $from ]] || load_after=$(cat "$from/load_after")
echo "$load_after" >"$out/load_after"

# verdict VALUE LIMIT [ROW]: met, missed, or why there is no figure
verdict() {
	if [[ -n ${3:-} && ${RC[$3]:-} != 0 ]]; then
		echo "missed (the run failed: ${RC[$3]:-not run})"
	elif ! isnum "$1"; then
		echo "not measured"
	elif le "$1" "$2"; then
		echo met
	else
		echo missed
	fi
}

# worst KEY: the largest figure of KEY over the rows, and the row
worst() {
	local best="" row="" v name
	for name in "${names[@]}"; do
		v=$(kv "${L[$name]}" "$1")
		[[ -n $v ]] || v=$(kv "${L[$name]}" "${1#live_}")
		isnum "$v" || continue
		if [[ -z $best ]] || gt "$v" "$best"; then
			best=$v row=$name
		fi
	done
	echo "${best:-NA} ${row:-none}"
}

# latency_row NAME LIMIT_MS: the measured part and verdict of a p99 target
latency_row() {
	local line=${L[$1]} p99 conv v
	p99=$(kv "$line" propagation_p99_ms)
	conv=$(kv "$line" converged)
	v=$(verdict "$p99" "$2" "$1")
	if [[ $v == met ]] && ! all_in "$conv"; then
		v="missed (converged $conv)"
	fi
	echo "p99 $p99 ms at $(commas "$(kv "$line" clients)") clients, converged $conv, simulator $(simulator "$1")% of the CPU|$v"
}

# simulator NAME: the client simulator's share of the CPU the row used
simulator() {
	local line=${L[$1]} srv tool
	srv=$(kv "$line" server_cpu_s)
	tool=$(kv "$line" loadgen_cpu_s)
	isnum "$srv" && isnum "$tool" || return 0
	awk -v s="$srv" -v t="$tool" 'BEGIN { if (s + t > 0) printf "%.0f", 100 * t / (s + t) }'
}

# profile_summary FILE [PART...]: where a profile's CPU went, by part
# (label|focus regexp); by default the simulator's parts.
profile_summary() {
	local f=$1 parts="" part label re pct
	shift
	[[ -f $f ]] || return 0
	(($#)) || set -- 'its clients (receive, check, ACK)|loadgen\.\(\*client\)\.run' \
		'gRPC writes (ACKs, flow control)|transport\.\(\*loopyWriter\)\.run' \
		'gRPC frame reads|transport\.\(\*http2Client\)\.reader' \
		'rendering and writing the file|loadgen\.\(\*runner\)\.changes' \
		'garbage collection|runtime\.gcBgMarkWorker'
	for part in "$@"; do
		IFS='|' read -r label re <<<"$part"
		pct=$(go tool pprof -top -nodecount=100000 -focus="$re" "$f" 2>/dev/null |
			awk '/^Showing nodes accounting for/ { sub(",", "", $6); print $6 }')
		parts+="${parts:+, }$label ${pct:-NA}"
	done
	echo "$parts"
}

targets_table() {
	local l1=${L[propagation-1k]} w v
	echo "| target | measured | limit | result |"
	echo "| --- | --- | --- | --- |"
	v=$(kv "$l1" server_cpu_us_per_response_without_source)
	echo "| server CPU per delivered response, file source excluded | $v µs ($(commas "$(kv "$l1" clients)")-client row; $(kv "$l1" server_cpu_us_per_response) µs with the source) | <= 40 µs | $(verdict "$v" 40 propagation-1k) |"
	IFS='|' read -r w v <<<"$(latency_row propagation-1k 150)"
	echo "| 1,000 clients x 100 clusters x 10k endpoints, p99 | $w | <= 150 ms | $v |"
	IFS='|' read -r w v <<<"$(latency_row propagation-5k 500)"
	echo "| 5,000 clients, p99 | $w | <= 500 ms | $v |"
	IFS='|' read -r w v <<<"$(latency_row propagation-10k 1000)"
	echo "| 10,000 clients, converged, p99 | $w | <= 1 s | $v |"
	read -r v w <<<"$(worst live_heap_per_client_kb)"
	echo "| live heap per client | $v KB (worst row: $w) | <= 30 KB | $(verdict "$v" 30) |"
	read -r v w <<<"$(worst stack_per_client_kb)"
	echo "| goroutine stack per client | $v KB (worst row: $w) | <= 16 KB | $(verdict "$v" 16) |"
	w=$(awk -v s="$(kv "$l1" source_cpu_s)" -v c="$(kv "$l1" changes)" 'BEGIN { if (s ~ /^[0-9.]+$/ && c > 0) printf "%.1f", s * 1000 / c; else print "NA" }')
	echo "| reparse of a 10k-endpoint file | $reparse_ms ms (median of \`BenchmarkFileReload/one-cluster\`; in the $(commas "$(kv "$l1" clients)")-client row the source used $w ms of CPU per change) | <= 15 ms | $(verdict "$reparse_ms" 15) |"
	storm_row
}

storm_row() {
	local line=${L[storm-5k]} res max wd v
	res=$(kv "$line" storm_resynced)
	max=$(kv "$line" storm_resync_max_ms)
	wd=$(kv "$line" withdrawn)
	v=$(verdict "$max" 10000 storm-5k)
	if [[ $v == met ]] && ! all_in "$res"; then
		v="missed (resynced $res)"
	elif [[ $v == met && $wd != 0 ]]; then
		v="missed ($wd resources withdrawn)"
	fi
	echo "| reconnect storm of 5,000 clients | $(commas "$(kv "$line" clients)") clients: resynced $res, the last after $max ms; $wd resources withdrawn | all resynced <= 10 s, nothing withdrawn | $v |"
}

# per_replica sets held to the largest client count whose p99 met its
# target, and missed to the counts whose p99 did not.
per_replica() {
	local row name limit v c
	held=0 missed=()
	for row in propagation-1k:150 propagation-5k:500 propagation-10k:1000; do
		name=${row%:*} limit=${row#*:}
		IFS='|' read -r _ v <<<"$(latency_row "$name" "$limit")"
		c=$(kv "${L[$name]}" clients)
		if [[ $v == met ]]; then
			held=$c
		elif [[ -n $c ]]; then
			missed+=("$(commas "$c")")
		fi
	done
}

replica_text() {
	local line=${L[replicas-2k]} agreed
	case $(kv "$line" replica_versions_identical) in
	true) agreed="came with the same version from either replica (0 mismatches)" ;;
	false) agreed="did not always come with the same version: $(kv "$line" replica_version_mismatches) contents had two (the row failed; its log names them)" ;;
	*) agreed="would have been compared, but none reached clients of both replicas" ;;
	esac
	echo "Two replicas: the replica row spawns two servers on the same file and"
	echo "connects its $(commas "$(kv "$line" clients)") clients round-robin, half to each. Every content that"
	echo "clients of both replicas received ($(kv "$line" replica_versions_compared) of them: SotW responses, delta"
	echo "resources and delta responses, keyed by the bytes received) $agreed."
	echo "Propagation, p50 / p99: replica 0 $(kv "$line" replica0_p50_ms) / $(kv "$line" replica0_p99_ms) ms ($(kv "$line" replica0_converged) converged), replica 1"
	echo "$(kv "$line" replica1_p50_ms) / $(kv "$line" replica1_p99_ms) ms ($(kv "$line" replica1_converged)). Both replicas and the simulator share the"
	echo "machine's cores, so this row is no measure of one replica's capacity;"
	echo "what it compares is what the clients of each replica see."
}

# simulator_bound: the rows in which the simulator used more CPU than the
# server
simulator_bound() {
	local name s bound=()
	for name in "${names[@]}"; do
		s=$(simulator "$name")
		[[ -z $s ]] || ! gt "$s" 50 || bound+=("$name")
	done
	if [[ ${#bound[@]} == 0 ]]; then
		echo "no row was"
	else
		echo "$(join "${bound[@]}")"
	fi
}

# server_parts are where the server's CPU goes, for server_text.
server_parts=(
	'gRPC writes (responses, socket writes)|transport\.\(\*loopyWriter\)\.run'
	'gRPC frame reads|transport\.\(\*http2Server\)\.HandleStreams'
	'decoding requests (go-control-plane receive loops)|v3\.\(\*server\)\.(Delta)?StreamHandler\.func1'
	'go-control-plane stream loops|v3\.\(\*server\)\.(processADS|processDelta)$'
	'ringxds request and response callbacks|server\.callbacks\.'
	'ringxds caches|xdscache\.'
	'source, build and publish|watch\.\(\*FileSource\)\.Run'
	'garbage collection|runtime\.gcBgMarkWorker'
)

# server_text says where the server's CPU went in the rows it was profiled in.
server_text() {
	local name line
	echo "Where the server's CPU goes (\`--cpu-profile\` over the change phase;"
	echo "\`<row>.server.pprof\` in the run's directory; shares of its samples,"
	echo "overlapping where one part calls another):"
	echo
	for name in propagation-1k "$profiled"; do
		line=${L[$name]}
		[[ -f $out/$name.server.pprof ]] || continue
		echo "- $(commas "$(kv "$line" clients)") clients, $(kv "$line" server_cpu_us_per_response) µs per response: $(profile_summary "$out/$name.server.pprof" "${server_parts[@]}")."
	done
}

simulator_text() {
	local line=${L[$profiled]} share
	share=$(simulator "$profiled")
	echo "The client simulator shares the cores with the server. In the"
	echo "$(commas "$(kv "$line" clients)")-client row it used $(kv "$line" loadgen_cpu_s) s of CPU against the server's $(kv "$line" server_cpu_s) s during"
	echo "the change phase (${share:-NA}% of what both used; $(kv "$line" loadgen_cpu_us_per_response) µs per response received"
	echo "against the server's $(kv "$line" server_cpu_us_per_response) µs per response sent). A row in which the"
	echo "simulator used more CPU than the server is bound by the simulator rather"
	echo "than the server: $(simulator_bound). The simulator's CPU profile over that"
	echo "phase (\`$profiled.loadgen.pprof\` in the run's directory) puts its time in:"
	echo "$(profile_summary "$out/$profiled.loadgen.pprof") (shares of its samples,"
	echo "overlapping where one part calls another). Memory: the server held"
	echo "$(kv "$line" server_rss_mb) MB at rest with every client connected, the simulator peaked at"
	echo "$(kv "$line" loadgen_max_rss_mb) MB, on a machine of $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)."
}

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || echo unknown)
section=$out/section.md
per_replica
{
	echo "## Control plane scale"
	echo
	echo "Measured by \`hack/bench-scale.sh\` (\`make bench-scale\`): each row spawns a fresh"
	echo "\`xds-server\` on loopback (two for the replica row) with the default 50 ms"
	echo "file debounce, writes 100 clusters with 10,000 endpoints in all, connects"
	echo "the clients (one gRPC connection each, as separate proxies have), then"
	echo "makes one endpoint change (one to three endpoints of one cluster) every"
	echo "500 ms. Propagation is the time from the start of the file write to the"
	echo "arrival of the EDS response that holds the change, at every client"
	echo "subscribed to that cluster, so it includes the debounce, the reparse of the"
	echo "file, the snapshot build and the fan-out. Every EDS response is decoded and"
	echo "checked against the file's history: a client that ever receives older"
	echo "content than it holds fails the run."
	echo
	echo "- machine: $(nproc) cores ($cpu), $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo 2>/dev/null), $(go version | cut -d' ' -f3)"
	echo "- commit ${BENCH_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%d); every figure below is from this one run"
	echo "- load average (1, 5, 15 min) before: $load_before, after: $load_after; the client"
	echo "  simulator shares the machine with the server, so figures on a busy machine"
	echo "  are upper bounds"
	if [[ $quick == 1 ]]; then
		echo "- BENCH_QUICK: every client count is a tenth of the one named, so the"
		echo "  targets below are judged against figures of far smaller runs"
	fi
	echo
	echo "### Targets"
	echo
	targets_table
	echo
	if [[ $held != 0 ]]; then
		echo "One replica holds $(commas "$held") clients at these targets: the largest client"
		echo "count whose p99 met its own target in this run$([[ ${#missed[@]} == 0 ]] || echo "; the target of $(join "${missed[@]}") clients was missed")."
	else
		echo "In this run no client count met its p99 target, so no count of clients"
		echo "per replica is given at these targets."
	fi
	echo "Heap and stack per client are the worst of all rows; the reparse is the"
	echo "source alone, from reading the file to the state it publishes, with one"
	echo "cluster changed (the benchmark's loop also rewrites the file, counted in"
	echo "its time), on the same machine before the scenarios ran."
	echo
	replica_text
	echo
	server_text
	echo
	simulator_text
	echo
	echo "### Scenarios"
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
	echo "whose share of the server's CPU is in parentheses. In the replica row the"
	echo "server figures are the two replicas' together."
	echo
	echo "| scenario | converged | p50 ms | p99 ms | max ms | server change-to-push / push ms | CPU s server / tool | server CPU us / response, without source (source share) | server RSS MB | RSS / client KB | live heap / client KB | stack / client KB | bytes / change | load | notes | result |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
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
