package server

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	rpc "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

type csdsState struct {
	version, status string
	size            int
}

func csdsStates(r *registry, node string) map[string]csdsState {
	out := map[string]csdsState{}
	for _, cc := range r.clientConfigs(func(n string) bool { return n == node }, 1<<30) {
		for _, g := range cc.GenericXdsConfigs {
			out[g.TypeUrl[len(g.TypeUrl)-11:]+"/"+g.Name] = csdsState{g.VersionInfo, g.ClientStatus.String(), len(g.GetXdsConfig().GetValue())}
		}
	}
	return out
}

func clusterBytes(t testing.TB, name string, timeout int64) []byte {
	b, err := cache.MarshalResource(&cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(timeout) * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sotwPush sends values on stream id as a CDS response and answers it.
func sotwPush(t testing.TB, cb callbacks, id int64, nonce string, values [][]byte, nack bool) string {
	req := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType}
	resp := sotwResponse(resource.ClusterType, nonce, values)
	cb.OnStreamResponse(context.Background(), id, req, resp)
	ans := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: nonce}
	if nack {
		ans.VersionInfo = ""
		ans.ErrorDetail = &rpc.Status{Message: "bad"}
	}
	mustOK(t, cb.OnStreamRequest(id, ans))
	return resp.GetVersionInfo()
}

// Three SotW streams share the list of what they hold; one ACKs a new
// version, one NACKs it, one is never sent it: each shows its own.
func TestCOWSotW(t *testing.T) {
	r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
	cb := callbacks{r}
	a0, a1 := clusterBytes(t, "a", 1), clusterBytes(t, "b", 1)
	a0new := clusterBytes(t, "a", 2222)
	var v1 string
	for id := int64(1); id <= 3; id++ {
		mustOK(t, cb.OnStreamOpen(context.Background(), id, ""))
		mustOK(t, cb.OnStreamRequest(id, &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: fmt.Sprint("n", id)}}))
		v1 = sotwPush(t, cb, id, "1", [][]byte{a0, a1}, false)
	}
	c1, c3 := r.get(ProtocolSotW, 1), r.get(ProtocolSotW, 3)
	if c1.status.Types["cds"].held.vals != c3.status.Types["cds"].held.vals {
		t.Fatal("not shared")
	}
	v2 := sotwPush(t, cb, 1, "2", [][]byte{a0new, a1}, false)
	sotwPush(t, cb, 2, "2", [][]byte{a0new, a1}, true)
	s1, s2, s3 := csdsStates(r, "n1"), csdsStates(r, "n2"), csdsStates(r, "n3")
	t.Logf("n1 %v\nn2 %v\nn3 %v", s1, s2, s3)
	if s1[".v3.Cluster/a"] != (csdsState{v2, "ACKED", len(a0new)}) {
		t.Errorf("n1 a: %v", s1[".v3.Cluster/a"])
	}
	if s2[".v3.Cluster/a"].status != "NACKED" || s2[".v3.Cluster/b"].status != "NACKED" {
		t.Errorf("n2: %v", s2)
	}
	if s3[".v3.Cluster/a"] != (csdsState{v1, "ACKED", len(a0)}) || s3[".v3.Cluster/b"] != (csdsState{v1, "ACKED", len(a1)}) {
		t.Errorf("n3 shows another stream's update: %v", s3)
	}
}

// Delta: two streams hold the same; one is pushed one changed resource and
// removes another; the other keeps what it had.
func TestCOWDelta(t *testing.T) {
	r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
	cb := callbacks{r}
	vals := [][]byte{clusterBytes(t, "a", 1), clusterBytes(t, "b", 1), clusterBytes(t, "c", 1)}
	names := []string{"a", "b", "c"}
	for id := int64(1); id <= 2; id++ {
		mustOK(t, cb.OnDeltaStreamOpen(context.Background(), id, ""))
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: fmt.Sprint("d", id)}, ResourceNamesSubscribe: []string{"*"}}
		mustOK(t, cb.OnStreamDeltaRequest(id, req))
		cb.OnStreamDeltaResponse(id, req, deltaResponse(resource.ClusterType, "1", names, vals))
		mustOK(t, cb.OnStreamDeltaRequest(id, &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: "1"}))
	}
	before := csdsStates(r, "d2")
	resp := deltaResponse(resource.ClusterType, "2", []string{"b"}, [][]byte{clusterBytes(t, "b", 99)})
	resp.RemovedResources = []string{"c"}
	cb.OnStreamDeltaResponse(1, nil, resp)
	mustOK(t, cb.OnStreamDeltaRequest(1, &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: "2"}))
	after, s1 := csdsStates(r, "d2"), csdsStates(r, "d1")
	t.Logf("d1 %v\nd2 %v", s1, after)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("d2 changed: before %v after %v", before, after)
	}
	if _, ok := s1[".v3.Cluster/c"]; ok || len(s1) != 2 {
		t.Errorf("d1 %v", s1)
	}
}

// Streams with names nobody else has: once closed, the tables forget them.
// sharedStreams is how many hostile streams the intern test opens.
const sharedStreams = 300

func TestInternTablesShrink(t *testing.T) {
	count := func() (int, int) {
		heldValues.mu.Lock()
		defer heldValues.mu.Unlock()
		heldLists.mu.Lock()
		defer heldLists.mu.Unlock()
		return len(heldValues.m), len(heldLists.m)
	}
	runtime.GC()
	runtime.GC()
	v0, l0 := count()
	h0 := liveHeap()
	r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
	cb := callbacks{r}
	n := int64(sharedStreams)
	for id := int64(1); id <= n; id++ {
		mustOK(t, cb.OnDeltaStreamOpen(context.Background(), id, ""))
		claims := map[string]string{}
		var sub []string
		for j := range 20 {
			name := fmt.Sprintf("hostile-%d-%d-%0200d", id, j, 0)
			claims[name] = fmt.Sprintf("v-%d-%d-%0100d", id, j, 0)
			sub = append(sub, name)
		}
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: fmt.Sprint("h", id)},
			ResourceNamesSubscribe: sub, InitialResourceVersions: claims}
		mustOK(t, cb.OnStreamDeltaRequest(id, req))
		var vals [][]byte
		for j := range 5 {
			vals = append(vals, clusterBytes(t, sub[j], id))
		}
		cb.OnStreamDeltaResponse(id, req, deltaResponse(resource.ClusterType, "1", sub[:5], vals))
	}
	v1, l1 := count()
	h1 := liveHeap()
	for id := int64(1); id <= n; id++ {
		cb.OnDeltaStreamClosed(id, nil)
	}
	deadline := time.Now().Add(5 * time.Second)
	var v2, l2 int
	for {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		if v2, l2 = count(); v2 <= v0 && l2 <= l0 || time.Now().After(deadline) {
			break
		}
	}
	var h2 uint64
	for range 20 {
		time.Sleep(20 * time.Millisecond)
		h2 = liveHeap()
	}
	t.Logf("values %d -> %d -> %d, lists %d -> %d -> %d, heap %d -> %d -> %d", v0, v1, v2, l0, l1, l2, h0, h1, h2)
	if v2 > v0 || l2 > l0 {
		t.Errorf("tables kept entries of closed streams")
	}
	if int64(h2)-int64(h0) > 200<<10 {
		t.Errorf("heap grew by %d bytes after all streams closed", int64(h2)-int64(h0))
	}
	runtime.KeepAlive(r)
}

// Many streams updating shared lists while CSDS and /debug/clients read.
func TestRaceSharedHeld(t *testing.T) {
	r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
	cb := callbacks{r}
	var versions [][][]byte
	for v := range 4 {
		var vals [][]byte
		for j := range 20 {
			vals = append(vals, clusterBytes(t, fmt.Sprint("c", j), int64(v+1)))
		}
		versions = append(versions, vals)
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = r.clientConfigs(func(string) bool { return true }, 1<<20)
			_ = r.snapshot()
			_ = []*statusv3.ClientConfig(nil)
		}
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 5 {
				id := int64(w*100 + k + 1)
				delta := w%2 == 1
				if delta {
					mustOK(t, cb.OnDeltaStreamOpen(context.Background(), id, ""))
					req := &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: fmt.Sprint("r", id)}, ResourceNamesSubscribe: []string{"*"}}
					mustOK(t, cb.OnStreamDeltaRequest(id, req))
				} else {
					mustOK(t, cb.OnStreamOpen(context.Background(), id, ""))
					mustOK(t, cb.OnStreamRequest(id, &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: fmt.Sprint("r", id)}}))
				}
				for i := range 40 {
					vals := versions[(i+w)%4]
					nonce := fmt.Sprint(i + 1)
					if delta {
						sub := vals[i%20 : i%20+1]
						cb.OnStreamDeltaResponse(id, nil, deltaResponse(resource.ClusterType, nonce, []string{fmt.Sprint("c", i%20)}, sub))
						ans := &discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: nonce}
						if i%3 == 0 {
							ans.ErrorDetail = &rpc.Status{Message: "no"}
						}
						mustOK(t, cb.OnStreamDeltaRequest(id, ans))
					} else {
						sotwPush(t, cb, id, nonce, vals, i%3 == 0)
					}
				}
				if delta {
					cb.OnDeltaStreamClosed(id, nil)
				} else {
					cb.OnStreamClosed(id, nil)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
}
