package debug_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/snapshot"
)

// The example's products cluster is laid out for fade-in, so it publishes
// weights nobody configured. The page and /debug/rings show the configured
// weight beside the published one and say why they differ; clusters that
// publish what was configured carry no such note.
func TestPageShowsConfiguredBesidePublishedWeights(t *testing.T) {
	snap := exampleSnapshot(t)
	h := newHandler(&fakePublisher{snap: snap})
	for _, kind := range []string{"clientlib", "envoy", "grpc"} {
		page := body(t, get(t, h, "/?client="+kind, nil))
		sec := sectionOf(t, page, "products")
		row := sec[strings.Index(sec, `<tr data-endpoint="127.0.0.1:9103">`):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `<td class="num">2</td>`) || !strings.Contains(row, `title="512 ring entries once no endpoint fades in"`) {
			t.Errorf("%s: the weight-2 row shows no configured weight 2 or its 512 entries: %s", kind, row)
		}
		for _, want := range []string{"The published weights are not the configured ones", "256 entries per unit of weight",
			"maximum_ring_size 4096 / fade_in.capacity 16", "1024 entries once no endpoint fades in", "Envoy, grpc-go, grpc-js and C-core"} {
			if !strings.Contains(sec, want) {
				t.Errorf("%s: products says nothing of %q", kind, want)
			}
		}
		if inv := sectionOf(t, page, "inventory"); strings.Contains(inv, `class="note weights"`) {
			t.Errorf("%s: inventory publishes its configured weights, yet has a weights note", kind)
		}
	}

	var rings struct {
		Clusters []struct {
			Name        string
			WeightsNote string `json:"weights_note"`
			Endpoints   []struct {
				Endpoint         string
				Weight           uint32
				ConfiguredWeight uint32 `json:"configured_weight"`
				RingEntries      uint64 `json:"ring_entries"`
			}
		}
	}
	resp := get(t, h, "/debug/rings?client=envoy", nil)
	if err := json.NewDecoder(resp.Body).Decode(&rings); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/rings: %d, %v", resp.StatusCode, err)
	}
	for _, c := range rings.Clusters {
		for _, ep := range c.Endpoints {
			if ep.ConfiguredWeight == 0 {
				t.Errorf("%s %s: no configured_weight", c.Name, ep.Endpoint)
			}
			if c.Name == "products" && (ep.Weight == ep.ConfiguredWeight || ep.RingEntries != 256*uint64(ep.ConfiguredWeight)) {
				t.Errorf("products %s: weight %d, configured %d, ring entries %d", ep.Endpoint, ep.Weight, ep.ConfiguredWeight, ep.RingEntries)
			}
		}
		if (c.WeightsNote != "") != (c.Name == "products") {
			t.Errorf("%s: weights note %q", c.Name, c.WeightsNote)
		}
	}
}

// Mid-fade the published weights change every step; the note says so.
func TestWeightsNoteExplainsAFade(t *testing.T) {
	snap := exampleSnapshot(t)
	snap.Fading = map[string][]snapshot.FadeStatus{"products": {{
		Endpoint: "127.0.0.1:9103", Start: time.Now().Add(-15 * time.Second), Duration: 30 * time.Second, Exponent: 2.5, Share: 0.18,
	}}}
	sec := sectionOf(t, body(t, get(t, newHandler(&fakePublisher{snap: snap}), "/?client=envoy", nil)), "products")
	if !strings.Contains(sec, "they change every second") {
		t.Errorf("a fading cluster's note does not say its weights change: %s", sec)
	}
}
