package xdscache

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

type updater interface {
	cache.Cache
	UpdateResources(map[string]types.Resource, []string) error
}

// BenchmarkFanOut is the cache's share of one EDS change reaching Envoys:
// 1,000 SotW streams subscribe to all 100 clusters' endpoints; each
// iteration changes one cluster, and every stream takes its response and
// re-arms its watch as go-control-plane's server does on the ACK. Reported
// per response, next to go-control-plane's LinearCache as the baseline.
func BenchmarkFanOut(b *testing.B) {
	for _, impl := range []struct {
		name string
		new  func() updater
	}{
		{"xdscache", func() updater { return New(resource.EndpointType) }},
		{"LinearCache", func() updater { return cache.NewLinearCache(resource.EndpointType) }},
	} {
		b.Run(impl.name, func(b *testing.B) { benchFanOut(b, impl.new(), 1000, 100) })
	}
}

func benchFanOut(b *testing.B, c updater, streams, clusters int) {
	names := make([]string, clusters)
	all := make(map[string]types.Resource, clusters)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%03d", i)
		all[names[i]] = claResource(names[i], 1)
	}
	if err := c.UpdateResources(all, nil); err != nil {
		b.Fatal(err)
	}
	type sotwStream struct {
		sub    stream.Subscription
		ch     chan cache.Response
		cancel func()
	}
	ss := make([]*sotwStream, streams)
	arm := func(s *sotwStream, version string) {
		s.sub.SetResourceSubscription(names)
		var err error
		s.cancel, err = c.CreateWatch(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: version, ResourceNames: names}, s.sub, s.ch)
		if err != nil {
			b.Fatal(err)
		}
	}
	take := func(s *sotwStream) string {
		r := <-s.ch
		s.sub.SetReturnedResources(r.GetReturnedResources())
		if _, err := r.GetDiscoveryResponse(); err != nil {
			b.Fatal(err)
		}
		return r.GetResponseVersion()
	}
	for i := range ss {
		ss[i] = &sotwStream{sub: stream.NewSotwSubscription(names, false), ch: make(chan cache.Response, 1)}
		arm(ss[i], "")
		arm(ss[i], take(ss[i]))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		name := names[i%clusters]
		if err := c.UpdateResources(map[string]types.Resource{name: claResource(name, uint32(i+2))}, nil); err != nil {
			b.Fatal(err)
		}
		for _, s := range ss {
			s.cancel()
			arm(s, take(s))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/response")
}
