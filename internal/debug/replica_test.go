package debug_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/server"
)

// The page header and /debug/clients name the replica answering and its
// build, so two replicas running different builds tell themselves apart.
func TestPageAndClientsNameTheReplica(t *testing.T) {
	replica := buildinfo.Replica{Name: "ringxds-0", Build: buildinfo.Info{
		Version: "v1.2.3", Revision: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26.8"}}
	clients := []server.ClientStatus{{StreamID: 1, NodeID: "envoy-1", Replica: replica}}
	h := debug.New(debug.Options{Server: &fakePublisher{snap: exampleSnapshot(t), clients: clients},
		Gatherer: prometheus.NewRegistry(), Replica: replica})

	page := body(t, get(t, h, "/", nil))
	header := page[strings.Index(page, "<header>"):strings.Index(page, "</header>")]
	for _, want := range []string{"ringxds-0", "v1.2.3", "0123456789ab", "modified", "go1.26.8"} {
		if !strings.Contains(header, want) {
			t.Errorf("page header lacks %q: %s", want, header)
		}
	}

	var got struct {
		Replica buildinfo.Replica     `json:"replica"`
		Clients []server.ClientStatus `json:"clients"`
	}
	if err := json.Unmarshal([]byte(body(t, get(t, h, "/debug/clients", nil))), &got); err != nil {
		t.Fatal(err)
	}
	if got.Replica != replica || len(got.Clients) != 1 || got.Clients[0].Replica != replica {
		t.Fatalf("/debug/clients replica = %+v, clients %+v; want %+v on both", got.Replica, got.Clients, replica)
	}
}
