package debug_test

import (
	"encoding/json"
	"testing"
)

// With no problems, both endpoints that list them say [] rather than one
// saying [] and the other null.
func TestNoProblemsIsAnEmptyListEverywhere(t *testing.T) {
	h := newHandler(&fakePublisher{snap: exampleSnapshot(t)})
	for _, path := range []string{"/debug/problems", "/debug/snapshot?client=envoy"} {
		var out map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body(t, get(t, h, path, nil))), &out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := string(out["problems"]); got != "[]" {
			t.Errorf("%s: problems = %s, want []", path, got)
		}
	}
}
