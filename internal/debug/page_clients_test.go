package debug_test

import (
	"strings"
	"testing"

	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// A client asking for a cluster that is not published shows it, with the
// names a typo away, instead of only a subscription count.
func TestPageNamesUnknownClusters(t *testing.T) {
	clients := []server.ClientStatus{{
		StreamID: 1, Protocol: server.ProtocolSotW, NodeID: "checkout-1", Kind: snapshot.KindClientlib,
		Types:           map[string]*server.TypeStatus{"cds": {Subscribed: 2}},
		UnknownClusters: []server.UnknownName{{Name: "product", DidYouMean: []string{"products"}}},
	}}
	page := body(t, get(t, newHandler(&fakePublisher{snap: exampleSnapshot(t), clients: clients}), "/", nil))
	want := `asks for cluster <code>product</code>, which is not published: it gets nothing for it (did you mean <code>products</code>?)`
	if !strings.Contains(page, want) {
		t.Errorf("the clients table does not name the unknown cluster; want %s in\n%s", want, page[strings.Index(page, `id="clients"`):])
	}
}
