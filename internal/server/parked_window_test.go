package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/model"
)

func grpcFrame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// A client that never reads (it advertises a stream window of 0) blocks
// the server's Send; go-control-plane's receive goroutine then blocks on
// its unbuffered channel and gRPC buffers whatever the client sends on the
// stream, up to the stream's flow-control window. hostile_test's heapBound
// allows 64 KiB a stream for all of a stream's state, so the window stays
// at that: a 256 KiB window let such a client park four times as much in
// every stream (at the default 1024+8 streams a connection, some 258 MiB
// from one client), and grpc-go's dynamic windows grew to about 4 MiB and
// parked about 1.5 MiB a stream.
func TestNonReadingClientParksAStreamWindow(t *testing.T) {
	const streams = 50
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(ctx, Options{Limits: &Limits{}})
	st := model.State{}
	var eps []model.Endpoint
	for i := range 4000 {
		eps = append(eps, model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080})
	}
	st.Clusters = []model.Cluster{{Name: "big", Endpoints: eps}, {Name: "small", Endpoints: eps[:1]}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(st); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", serveLoopback(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var wmu sync.Mutex
	wmu.Lock()
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	wmu.Unlock()

	// Windows the server grants us.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	connWin, initWin, gotSettings := int64(65535), int64(65535), false
	streamWin := map[uint32]int64{}
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				mu.Lock()
				cond.Broadcast()
				mu.Unlock()
				return
			}
			mu.Lock()
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
						for id := range streamWin {
							streamWin[id] += int64(v) - initWin
						}
						initWin = int64(v)
					}
					gotSettings = true
					wmu.Lock()
					_ = fr.WriteSettingsAck()
					wmu.Unlock()
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					connWin += int64(f.Increment)
				} else {
					streamWin[f.StreamID] += int64(f.Increment)
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					wmu.Lock()
					_ = fr.WritePing(true, f.Data)
					wmu.Unlock()
				}
			case *http2.RSTStreamFrame:
				t.Logf("stream %d reset: %v", f.StreamID, f.ErrCode)
			}
			cond.Broadcast()
			mu.Unlock()
		}
	}()
	mu.Lock()
	for !gotSettings {
		cond.Wait()
	}
	mu.Unlock()

	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	var ids []uint32
	for i := range streams {
		id := uint32(2*i + 1)
		hb.Reset()
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
			{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"},
			{"content-type", "application/grpc"}, {"te", "trailers"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		mu.Lock()
		streamWin[id] = initWin
		mu.Unlock()
		wmu.Lock()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		wmu.Unlock()
		ids = append(ids, id)
	}
	// send writes p on stream id within the windows; false once they
	// stay shut for 300 ms.
	send := func(id uint32, p []byte) bool {
		for len(p) > 0 {
			mu.Lock()
			deadline := time.Now().Add(300 * time.Millisecond)
			for connWin <= 0 || streamWin[id] <= 0 {
				if time.Now().After(deadline) {
					mu.Unlock()
					return false
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
			}
			n := min(int64(len(p)), connWin, streamWin[id], 16<<10)
			connWin -= n
			streamWin[id] -= n
			mu.Unlock()
			wmu.Lock()
			err := fr.WriteData(id, false, p[:n])
			wmu.Unlock()
			if err != nil {
				return false
			}
			p = p[n:]
		}
		return true
	}
	// Two responses, the first over gRPC's 64 KiB write quota: the
	// second Send blocks, and so does the stream's receive loop after
	// one more request.
	for _, id := range ids {
		send(id, grpcFrame(&discovery.DiscoveryRequest{Node: testNode(fmt.Sprint(id)), TypeUrl: resource.EndpointType, ResourceNames: []string{"big"}}))
		send(id, grpcFrame(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"big", "small"}}))
		send(id, grpcFrame(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"small"}}))
	}
	time.Sleep(500 * time.Millisecond)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// Now one large request a stream, as far as the windows let it.
	big := make([]byte, 4<<20)
	big[0] = 0
	binary.BigEndian.PutUint32(big[1:], uint32(len(big)-5))
	var parked int64
	for _, id := range ids {
		mu.Lock()
		w := streamWin[id]
		mu.Unlock()
		send(id, big[:w])
		parked += w
	}
	time.Sleep(300 * time.Millisecond)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("initial stream window %d; parked %d KiB over %d streams (%d KiB a stream); heap in use grew %d KiB",
		initWin, parked>>10, streams, parked>>10/streams, grew>>10)
	if per := parked / streams; per > 64<<10 {
		t.Errorf("a stream the server is not reading holds %d KiB of the client's data; heapBound allows 64 KiB a stream for everything", per>>10)
	}
}
