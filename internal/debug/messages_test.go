package debug_test

import (
	"net/http"
	"strings"
	"testing"
)

// A misspelled cluster on /debug/pick answers with the fix and the
// published names, closest first.
func TestPickOfAnUnknownClusterListsTheKnownOnes(t *testing.T) {
	h := newHandler(&fakePublisher{snap: exampleSnapshot(t)})
	resp := get(t, h, "/debug/pick?cluster=product&key=k", nil)
	got := body(t, resp)
	want := `unknown cluster \"product\" (did you mean \"products\"?); published clusters, closest first: products, catalog, inventory`
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, want) {
		t.Errorf("status %d, %s; want 400 with %s", resp.StatusCode, got, want)
	}
	if got := body(t, get(t, h, "/debug/pick?cluster=orders&key=k", nil)); strings.Contains(got, "did you mean") || !strings.Contains(got, "closest first: ") {
		t.Errorf("a name nothing is near: %s", got)
	}
}

// The Maglev strip labels its slots 0 to size-1.
func TestMaglevStripLabelsItsLastSlot(t *testing.T) {
	sec := sectionOf(t, body(t, get(t, newHandler(&fakePublisher{snap: exampleSnapshot(t)}), "/", nil)), "inventory")
	if !strings.Contains(sec, ">slot 0<") || !strings.Contains(sec, ">slot 65536<") || strings.Contains(sec, "slot 65537") {
		t.Errorf("strip labels: %s", sec[strings.Index(sec, "<svg"):strings.Index(sec, "</svg>")])
	}
}

// Each cluster reminds that Envoy's picks rest on a header ringxds cannot
// see: the route's hash_policy in Envoy's own configuration.
func TestPageRemindsWhichHeaderEnvoyHashes(t *testing.T) {
	sec := sectionOf(t, body(t, get(t, newHandler(&fakePublisher{snap: exampleSnapshot(t)}), "/", nil)), "inventory")
	if !strings.Contains(sec, "Envoy picks assume its route's <code>hash_policy</code> hashes <code>x-sku</code>") {
		t.Errorf("no reminder of the header Envoy must hash: %s", sec)
	}
}
