package grpcbalancer

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
)

// capturingConn keeps the picker the balancer publishes.
type capturingConn struct {
	balancer.ClientConn
	picker balancer.Picker
}

func (c *capturingConn) UpdateState(s balancer.State) { c.picker = s.Picker }

func fadeConfigOf(t *testing.T, addrs ...string) *config {
	t.Helper()
	var eps []string
	for i, a := range addrs {
		eps = append(eps, fmt.Sprintf(`{"address":%q,"key":"k%d","ring_entries":16}`, a, i))
	}
	c, err := parseFadeConfig([]byte(`{"fade_duration":"10s","fade_exponent":2,"endpoints":[` + strings.Join(eps, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readyChildren(addrs ...string) []endpointsharding.ChildState {
	out := make([]endpointsharding.ChildState, len(addrs))
	for i, a := range addrs {
		out[i] = endpointsharding.ChildState{
			Endpoint: resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}},
			State:    balancer.State{ConnectivityState: connectivity.Ready, Picker: fixedPicker{i}},
		}
	}
	return out
}

// A new schedule none of whose endpoints is in EDS yet fails the channel
// rather than keep the previous schedule's ring over other children.
func TestFadeScheduleWithNoMemberInEDS(t *testing.T) {
	cc := &capturingConn{}
	b := &ringBalancer{ClientConn: cc, cfg: fadeConfigOf(t, "10.0.0.1:80", "10.0.0.2:80")}
	b.updateFade(readyChildren("10.0.0.1:80", "10.0.0.2:80"))
	if _, ok := cc.picker.(*picker); !ok {
		t.Fatalf("first schedule: published %T", cc.picker)
	}
	// What UpdateClientConnState does with a changed config.
	b.cfg, b.keys = fadeConfigOf(t, "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"), nil
	b.updateFade(readyChildren("10.0.0.1:80", "10.0.0.2:80"))
	if _, err := cc.picker.Pick(balancer.PickInfo{}); err == nil || !strings.Contains(err.Error(), "no endpoint of the schedule is in EDS") {
		t.Fatalf("second schedule, none of it in EDS: pick error %v", err)
	}
}
