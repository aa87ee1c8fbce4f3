package examples_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// The example is what a newcomer sees first (make run): it must not raise
// the fade-in warnings it is meant to show how to avoid, such as the one
// for a missing fade_in.capacity.
func TestExampleRaisesNoFadeInNote(t *testing.T) {
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(state, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	faded := 0
	for _, c := range state.Clusters {
		if c.FadeIn != nil {
			faded++
		}
		for _, n := range snap.Notes[c.Name] {
			if strings.HasPrefix(n, "fade-in:") {
				t.Errorf("cluster %s: %s", c.Name, n)
			}
		}
	}
	if faded == 0 {
		t.Fatal("no example cluster fades in: the example no longer shows fade_in")
	}
}
