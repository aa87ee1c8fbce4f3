package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gate stops a client reading its socket, as a wedged or overloaded proxy
// does: the kernel buffers fill, then the server's writes block. Stopping
// only the application's Recv would not do: gRPC's transport would keep
// draining the socket and answering pings, and the server would never notice.
type gate struct {
	stopOnce, releaseOnce sync.Once
	stopped, released     chan struct{}
}

func newGate() *gate {
	return &gate{stopped: make(chan struct{}), released: make(chan struct{})}
}

// stop makes every later Read block until release.
func (g *gate) stop() { g.stopOnce.Do(func() { close(g.stopped) }) }

// release lets reads proceed again, so the connection can be torn down.
func (g *gate) release() { g.releaseOnce.Do(func() { close(g.released) }) }

// dialer returns a gRPC context dialer whose connections obey the gate.
func (g *gate) dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: c, g: g}, nil
	}
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Read(p []byte) (int, error) {
	select {
	case <-c.g.stopped:
		<-c.g.released
	default:
	}
	return c.Conn.Read(p)
}

// isRateRefusal reports a stream refused over the server's new connection
// rate (--max-new-connections-per-second).
func isRateRefusal(err error) bool {
	return status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "--max-new-connections-per-second")
}

// isStreamEnd reports errors that end a stream in normal operation: the
// server going away or restarting, or the run ending.
func isStreamEnd(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}
