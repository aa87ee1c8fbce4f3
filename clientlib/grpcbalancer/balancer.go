package grpcbalancer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/lazy"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental/balancer/weight"
	ringhashattr "google.golang.org/grpc/resolver/ringhash"
	"google.golang.org/grpc/serviceconfig"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

func init() {
	balancer.Register(builder{name: Name})
	balancer.Register(builder{name: NameRingHash})
}

// builder builds both policies: they differ only in their config.
type builder struct{ name string }

func (b builder) Name() string { return b.name }

func (b builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	if b.name == NameRingHash {
		return parseFadeConfig(js)
	}
	return parseConfig(js)
}

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &ringBalancer{ClientConn: cc}
	// One pick_first child per endpoint, lazy and without automatic
	// reconnects, as grpc-go's ring_hash has (balancer/ringhash): a child
	// connects only when a pick needs it, so a client does not connect to
	// every endpoint of a large cluster. The ring decides between children,
	// each child owns its connection.
	b.child = endpointsharding.NewBalancer(b, opts, lazyPickFirst, endpointsharding.Options{DisableAutoReconnect: true})
	return b
}

func lazyPickFirst(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return lazy.NewBalancer(cc, opts, balancer.Get(pickfirst.Name).Build)
}

// ringBalancer embeds the parent ClientConn to intercept the child's
// UpdateState and put a ring picker in front of the per-endpoint pickers.
type ringBalancer struct {
	balancer.ClientConn
	child balancer.Balancer

	mu   sync.Mutex
	cfg  *config
	keys []string // ring keys and weights the ring was built from, in child order
	ring ringhash.Ring
	// nring replaces ring for a ringxds.ring_hash config: one ring per
	// fade-in event, each key cut over on its own (fadein.NRing).
	nring *fadein.NRing
	// nringMembers maps nring's member indices to the schedule's.
	nringMembers []int
}

func (b *ringBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, ok := s.BalancerConfig.(*config)
	if !ok {
		return fmt.Errorf("%s: unexpected config type %T", Name, s.BalancerConfig)
	}
	b.mu.Lock()
	if b.cfg == nil || !b.cfg.equal(cfg) {
		b.keys = nil // rebuild the ring on the next child update
	}
	b.cfg = cfg
	b.mu.Unlock()
	return b.child.UpdateClientConnState(balancer.ClientConnState{
		// Lets outlier detection, when configured, see the children.
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
}

func (b *ringBalancer) ResolverError(err error) { b.child.ResolverError(err) }

// UpdateSubConnState is part of balancer.Balancer. SubConns here are created
// by endpointsharding's children with state listeners, so this only
// forwards, as grpc-go's own wrapping policies do.
func (b *ringBalancer) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	//lint:ignore SA1019 the interface requires the method; forwarding keeps the child's contract
	b.child.UpdateSubConnState(sc, s)
}

func (b *ringBalancer) ExitIdle() { b.child.ExitIdle() }

func (b *ringBalancer) Close() { b.child.Close() }

// UpdateState receives the children's states from endpointsharding.
func (b *ringBalancer) UpdateState(s balancer.State) {
	children := endpointsharding.ChildStatesFromPicker(s.Picker)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(children) == 0 || b.cfg == nil {
		b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
			Picker: base.NewErrPicker(errors.New(Name + ": no endpoints"))})
		return
	}
	if b.cfg.fade != nil {
		b.updateFade(children)
		return
	}
	eps, err := b.ringEndpoints(children)
	if err == nil {
		// endpointsharding hands children over in a rotated order that
		// changes between updates; sorting by ring key keeps the ring's
		// indices stable, so an unchanged endpoint set reuses the ring.
		order := make([]int, len(eps))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return strings.Compare(eps[x].Key, eps[y].Key) })
		sortedEps := make([]ringhash.Endpoint, len(eps))
		sortedChildren := make([]endpointsharding.ChildState, len(eps))
		for i, o := range order {
			sortedEps[i], sortedChildren[i] = eps[o], children[o]
		}
		eps, children = sortedEps, sortedChildren
		keys := make([]string, len(eps))
		for i, ep := range eps {
			keys[i] = ep.Key + "/" + strconv.FormatUint(uint64(ep.Weight), 10)
		}
		if !slices.Equal(keys, b.keys) {
			err = b.buildRing(eps)
			if err == nil {
				b.keys = keys
			}
		}
	}
	if err != nil {
		b.keys = nil
		b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
			Picker: base.NewErrPicker(fmt.Errorf("%s: %w", Name, err))})
		return
	}

	b.publish(&picker{ring: b.ring, header: b.cfg.HashHeader, children: children}, children)
}

// publish hands the parent a picker, in the state that all children
// aggregate to.
func (b *ringBalancer) publish(p *picker, all []endpointsharding.ChildState) {
	state := aggregateState(all)
	if state == connectivity.Connecting || state == connectivity.TransientFailure {
		// Keep one connection attempt going, as grpc-go's ring_hash does,
		// so a channel whose children all idle or failed recovers without
		// waiting for a pick: the first idle child in key order, unless one
		// is connecting already.
		exitFirstIdle(p.children)
	}
	b.ClientConn.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

// updateFade puts the children the schedule lists on an N-ring, in the
// schedule's order (fadeschedule.Schedule.Build, which also says why only
// endpoints in both the schedule and EDS are on it), and publishes a
// picker over them. Addresses carry the members: grpc-go before v1.80
// sets no hash key attribute, and the schedule names each endpoint's ring
// key itself.
func (b *ringBalancer) updateFade(children []endpointsharding.ChildState) {
	f := b.cfg.fade
	byAddr := make(map[string]int, len(children))
	for i, c := range children {
		if len(c.Endpoint.Addresses) > 0 {
			byAddr[c.Endpoint.Addresses[0].Addr] = i
		}
	}
	var keys []string
	for _, m := range f.Members {
		if _, ok := byAddr[m.Address]; ok {
			keys = append(keys, m.Address+"/"+m.Key+"/"+strconv.FormatUint(uint64(m.Entries), 10)+"/"+m.FadeStart.Format(time.RFC3339Nano))
		}
	}
	// With no member in EDS, Build fails (fadeschedule.ErrNoneInEDS) and
	// the balancer reports it: nil keys would equal the nil b.keys of a
	// config change and keep a ring of another schedule.
	if b.nring == nil || len(keys) == 0 || !slices.Equal(keys, b.keys) {
		n, index, err := f.Build(func(addr string) bool { _, ok := byAddr[addr]; return ok }, time.Now())
		if err != nil {
			b.keys = nil
			b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
				Picker: base.NewErrPicker(fmt.Errorf("%s: %w", NameRingHash, err))})
			return
		}
		b.nring, b.nringMembers, b.keys = n, index, keys
	}
	ringChildren := make([]endpointsharding.ChildState, len(b.nringMembers))
	for i, m := range b.nringMembers {
		ringChildren[i] = children[byAddr[f.Members[m].Address]]
	}
	b.publish(&picker{nring: b.nring, header: b.cfg.HashHeader, children: ringChildren}, children)
}

// aggregateState is grpc-go ring_hash's aggregation (gRFC A61): READY if
// any child is; else CONNECTING if any connects or idles, or if two or
// more failed while others remain; else TRANSIENT_FAILURE.
func aggregateState(children []endpointsharding.ChildState) connectivity.State {
	var ready, connecting, idle, failed int
	for _, c := range children {
		switch c.State.ConnectivityState {
		case connectivity.Ready:
			ready++
		case connectivity.Connecting:
			connecting++
		case connectivity.Idle:
			idle++
		case connectivity.TransientFailure:
			failed++
		}
	}
	switch {
	case ready > 0:
		return connectivity.Ready
	case failed >= 2:
		return connectivity.TransientFailure
	case connecting > 0:
		return connectivity.Connecting
	case failed == 1 && len(children) > 1:
		return connectivity.Connecting
	case idle > 0:
		return connectivity.Idle
	}
	return connectivity.TransientFailure
}

// exitFirstIdle starts the first idle child connecting, unless one is.
func exitFirstIdle(children []endpointsharding.ChildState) {
	var first func()
	for _, c := range children {
		switch c.State.ConnectivityState {
		case connectivity.Connecting:
			return
		case connectivity.Idle:
			if first == nil {
				first = c.ExitIdle
			}
		}
	}
	if first != nil {
		first()
	}
}

// ringEndpoints turns the children into ring members, index for index.
func (b *ringBalancer) ringEndpoints(children []endpointsharding.ChildState) ([]ringhash.Endpoint, error) {
	eps := make([]ringhash.Endpoint, len(children))
	for i, c := range children {
		if len(c.Endpoint.Addresses) == 0 {
			return nil, fmt.Errorf("endpoint %d has no address", i)
		}
		addr := c.Endpoint.Addresses[0].Addr
		switch b.cfg.Policy {
		case ringhash.PolicySkipper:
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("endpoint %q: %w", addr, err)
			}
			p, err := strconv.ParseUint(port, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("endpoint %q: port: %w", addr, err)
			}
			eps[i] = ringhash.Endpoint{Key: ringhash.SkipperIdentity(b.cfg.Scheme, host, uint32(p))}
		default:
			key := ringhashattr.HashKey(c.Endpoint)
			if key == "" {
				key = addr
			}
			w := weight.FromEndpoint(c.Endpoint).Weight
			eps[i] = ringhash.Endpoint{Key: key, Weight: max(w, 1)}
		}
	}
	return eps, nil
}

func (b *ringBalancer) buildRing(eps []ringhash.Endpoint) error {
	var err error
	switch b.cfg.Policy {
	case ringhash.PolicySkipper:
		b.ring, err = ringhash.NewSkipper(eps)
	case ringhash.PolicyRingHash:
		// grpc-go's ring (balancer/ringhash): sorted by key, capped at 4096
		// by default; ringxds publishes min = max <= 4096.
		b.ring, err = ringhash.NewRingHash(eps, ringhash.RingHashOptions{
			MinRingSize: b.cfg.MinRingSize, MaxRingSize: b.cfg.MaxRingSize, SortByKey: true,
		})
	case ringhash.PolicyMaglev:
		b.ring, err = ringhash.NewMaglev(eps, b.cfg.TableSize)
	}
	return err
}
