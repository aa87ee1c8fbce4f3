#!/usr/bin/env bash
# Proxyless gRPC demo (make demo, make demo-node): starts xds-server on
# examples/endpoints.yaml, three backends on the products ports, and a
# proxyless client that sends keyed RPCs through xds:///products and checks
# each against /debug/pick: grpc-go (CLIENT=go, the default) or grpc-js
# (CLIENT=node, examples/grpc-node; NODE_PATH must reach its node_modules).
# Everything it starts is stopped on exit, also on failure or Ctrl-C. Exits
# non-zero unless every key went where the control plane says.
#
# Its xds-server listens on XDS_ADDR (default 127.0.0.1:18100) and
# DEBUG_ADDR (default 127.0.0.1:18180), next to, not on, the ports of
# `make run` (18000, 18080), so the two run side by side.
set -euo pipefail

cd "$(dirname "$0")/../.."
GO=${GO:-go}
XDS_ADDR=${XDS_ADDR:-127.0.0.1:18100}
DEBUG_ADDR=${DEBUG_ADDR:-127.0.0.1:18180}
N=${N:-1000}
CLIENT=${CLIENT:-go}
case "$CLIENT" in
go | node) ;;
*)
	echo "CLIENT must be go or node, not '$CLIENT'" >&2
	exit 2
	;;
esac
# The products cluster of examples/endpoints.yaml lists these backends.
BACKENDS=(127.0.0.1:9101 127.0.0.1:9102 127.0.0.1:9103)

work=$(mktemp -d)
pids=()
cleanup() {
	status=$?
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "$status" -ne 0 ]; then
		for log in "$work"/*.log; do
			[ -s "$log" ] || continue
			echo "--- $(basename "$log") (last lines)"
			tail -n 15 "$log"
		done
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building xds-server and the demo programs"
$GO build -o "$work/xds-server" ./cmd/xds-server
$GO build -o "$work/backend" ./examples/grpc/server
$GO build -o "$work/client" ./examples/grpc/client

"$work/xds-server" --file examples/endpoints.yaml --xds-addr "$XDS_ADDR" --debug-addr "$DEBUG_ADDR" >"$work/xds-server.log" 2>&1 &
pids+=($!)
for addr in "${BACKENDS[@]}"; do
	"$work/backend" --addr "$addr" >"$work/backend-${addr##*:}.log" 2>&1 &
	pids+=($!)
done

# A process that died at once (a port in use, say) fails the demo here
# rather than as a timeout later.
sleep 0.5
for pid in "${pids[@]}"; do
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "a demo process exited at start; is something else using $XDS_ADDR, $DEBUG_ADDR or ports ${BACKENDS[*]}?" >&2
		echo "move the server with XDS_ADDR=host:port DEBUG_ADDR=host:port make demo" >&2
		exit 1
	fi
done

echo "xds-server: xDS $XDS_ADDR, debug page http://$DEBUG_ADDR/ ; backends ${BACKENDS[*]}"
if [ "$CLIENT" = node ]; then
	node examples/grpc-node/client.js --xds-server "$XDS_ADDR" --debug "http://$DEBUG_ADDR" --target products --header x-product-id -n "$N"
else
	GRPC_XDS_BOOTSTRAP_CONFIG=$("$work/client" --print-bootstrap --xds-server "$XDS_ADDR") \
		"$work/client" --debug "http://$DEBUG_ADDR" --target products --header x-product-id -n "$N"
fi
