package main

import (
	"flag"
	"fmt"

	"github.com/ringxds/ringxds/internal/server"
)

// addLimitFlags declares the flags bounding what one xDS client (one gRPC
// connection) can cost; 0 disables a limit. docs/xds.md, "Limits".
func addLimitFlags(fs *flag.FlagSet, l *server.Limits) {
	d := server.DefaultLimits()
	fs.IntVar(&l.StreamsPerConnection, "max-streams-per-connection", d.StreamsPerConnection,
		"concurrent xDS streams per gRPC connection (an Envoy without ADS opens one per EDS cluster); 0: unlimited")
	fs.IntVar(&l.NamesPerStream, "max-names-per-stream", d.NamesPerStream,
		"resource names one xDS stream may subscribe to, all types together; 0: unlimited")
	fs.IntVar(&l.NamesPerConnection, "max-names-per-connection", d.NamesPerConnection,
		"resource names the streams of one gRPC connection may subscribe to together; 0: unlimited")
	fs.Float64Var(&l.RequestsPerSecond, "max-requests-per-second", d.RequestsPerSecond,
		"sustained xDS requests per second per stream; 0: unlimited")
	fs.IntVar(&l.RequestBurst, "request-burst", d.RequestBurst,
		"xDS requests a stream may send at once above --max-requests-per-second")
	fs.IntVar(&l.MaxMessageBytes, "max-message-bytes", d.MaxMessageBytes,
		"largest xDS request accepted, in bytes; 0: gRPC's own limit is lifted")
	fs.Float64Var(&l.ConnectionsPerSecond, "max-new-connections-per-second", d.ConnectionsPerSecond,
		"new xDS connections accepted per second, over all clients; one over the rate waits up to 1 s, then is refused; 0: unlimited")
	fs.IntVar(&l.ConnectionBurst, "new-connection-burst", d.ConnectionBurst,
		"new xDS connections accepted at once above --max-new-connections-per-second (a reconnect storm)")
}

func checkLimits(l server.Limits) error {
	for _, v := range []struct {
		flag string
		n    float64
	}{
		{"max-streams-per-connection", float64(l.StreamsPerConnection)},
		{"max-names-per-stream", float64(l.NamesPerStream)},
		{"max-names-per-connection", float64(l.NamesPerConnection)},
		{"max-requests-per-second", l.RequestsPerSecond},
		{"request-burst", float64(l.RequestBurst)},
		{"max-message-bytes", float64(l.MaxMessageBytes)},
		{"max-new-connections-per-second", l.ConnectionsPerSecond},
		{"new-connection-burst", float64(l.ConnectionBurst)},
	} {
		if v.n < 0 {
			return fmt.Errorf("--%s %v must not be negative", v.flag, v.n)
		}
	}
	return nil
}
