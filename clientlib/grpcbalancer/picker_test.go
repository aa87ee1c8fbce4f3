package grpcbalancer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/fadeschedule"
	"github.com/ringxds/ringxds/internal/ringhash"
)

type fixedPicker struct{ i int }

func (fixedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, nil
}

// A fading batch: 100 established members and 10 fading, 32 entries each.
func fadingPicker(t testing.TB, start time.Time) *picker {
	t.Helper()
	curve := fadein.Curve{Duration: 10 * time.Second, Exponent: 2.5}
	members := make([]fadein.Member, 110)
	children := make([]endpointsharding.ChildState, 110)
	for i := range members {
		members[i] = fadein.Member{Key: ringhash.Endpoint{Key: fmt.Sprintf("backend-%03d", i), Weight: 32}, Curve: curve}
		if i >= 100 {
			members[i].FadeStart = start
		}
		children[i].State = balancer.State{ConnectivityState: connectivity.Ready, Picker: fixedPicker{i}}
	}
	n := fadein.NewNRing(fadeschedule.CountRing)
	if err := n.Update(members, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &picker{nring: n, header: DefaultHashHeader, children: children}
}

// The ring part of a pick, N-ring included, allocates nothing; reading the
// hash header costs grpc-go's one copy of its values.
func TestPickDoesNotAllocate(t *testing.T) {
	p := fadingPicker(t, time.Now().Add(-5*time.Second))
	info := balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(context.Background(), DefaultHashHeader, "product-1")}
	h := uint64(0x9e3779b97f4a7c15)
	if n := testing.AllocsPerRun(1000, func() {
		h += 0x9e3779b97f4a7c15
		if _, err := p.pick(h, true, info); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("pick allocates %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := p.Pick(info); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("Pick allocates %v times, want at most the header copy", n)
	}
}

// Mid-fade, each key is on its pre-fade owner or on its final one, and
// once the fade is over every key is on its final owner.
func TestFadingPickerCutsKeysOverToTheirFinalOwner(t *testing.T) {
	now := time.Now()
	before := fadingPicker(t, now.Add(time.Hour)) // nothing faded in yet
	mid := fadingPicker(t, now.Add(-5*time.Second))
	after := fadingPicker(t, now.Add(-time.Minute))
	owner := func(p *picker, h uint64) int {
		// One instant for every key: a loop that crossed a second would
		// see the fade a step further on for the rest of the keys.
		r, idx := p.ringAt(h, now)
		return member(idx, r.Pick(h))
	}
	final, err := fadeschedule.CountRing(func() []ringhash.Endpoint {
		eps := make([]ringhash.Endpoint, 110)
		for i := range eps {
			eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("backend-%03d", i), Weight: 32}
		}
		return eps
	}())
	if err != nil {
		t.Fatal(err)
	}
	moved, early := 0, 0
	for i := range 20000 {
		h := ringhash.HashKey(fmt.Sprintf("product-%d", i))
		b, m, a := owner(before, h), owner(mid, h), owner(after, h)
		if b >= 100 {
			t.Fatalf("key %d on new member %d before the fade", i, b)
		}
		if a != final.Pick(h) {
			t.Fatalf("key %d on %d after the fade, the final ring says %d", i, a, final.Pick(h))
		}
		if m != b && m != a {
			t.Fatalf("key %d mid-fade on %d: neither its pre-fade owner %d nor its final one %d", i, m, b, a)
		}
		if a != b {
			moved++
			if m == a {
				early++
			}
		}
	}
	// share(5 s of 10, exponent 2.5) = 17.7%.
	if got := float64(early) / float64(moved); got < 0.12 || got > 0.24 {
		t.Errorf("mid-fade %d of %d moving keys cut over (%.3f), want about 0.177", early, moved, got)
	}
}
