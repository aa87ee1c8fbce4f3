package fadeschedule

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

func TestParse(t *testing.T) {
	const good = `{"hash_header":"X-Product-ID","fade_duration":"10s","fade_exponent":2.5,"endpoints":[` +
		`{"address":"10.0.0.1:80","key":"a","ring_entries":32},` +
		`{"address":"10.0.0.2:80","key":"b","ring_entries":32,"fade_start":"2026-01-01T00:00:00.5Z"}]}`
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &Schedule{HashHeader: "X-Product-ID", Curve: fadein.Curve{Duration: 10 * time.Second, Exponent: 2.5}, Members: []Member{
		{Address: "10.0.0.1:80", Key: "a", Entries: 32},
		{Address: "10.0.0.2:80", Key: "b", Entries: 32, FadeStart: time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC)},
	}}
	if !s.Equal(want) {
		t.Fatalf("parsed %+v, want %+v", s, want)
	}
	for bad, why := range map[string]string{
		`[1]`:                                    "bad config",
		`{"fade_duration":"10s","endpoints":[]}`: "no endpoints",
		`{"fade_duration":"ten","endpoints":[{"address":"a:1","key":"a","ring_entries":1}]}`:                                              "fade_duration",
		`{"fade_duration":"10s","endpoints":[{"address":"a:1","key":"a","ring_entries":0.5}]}`:                                            "ring_entries",
		`{"fade_duration":"10s","endpoints":[{"address":"a:1","ring_entries":1}]}`:                                                        "a key",
		`{"fade_duration":"10s","endpoints":[{"address":"a:1","key":"a","ring_entries":1},{"address":"a:1","key":"b","ring_entries":1}]}`: "twice",
		`{"fade_duration":"10s","endpoints":[{"address":"a:1","key":"a","ring_entries":1,"fade_start":"now"}]}`:                           "fade_start",
	} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: error %v, want one mentioning %q", bad, err, why)
		}
	}
}

// schedule has old established members and fresh ones fading in from
// start, 16 entries each.
func schedule(old, fresh int, start time.Time, curve fadein.Curve) *Schedule {
	s := &Schedule{Curve: curve}
	for i := range old + fresh {
		m := Member{Address: fmt.Sprintf("10.0.0.%d:80", i+1), Key: fmt.Sprintf("backend-%03d", i), Entries: 16}
		if i >= old {
			m.FadeStart = start
		}
		s.Members = append(s.Members, m)
	}
	return s
}

func pickAll(t *testing.T, s *Schedule, has func(string) bool, built, at time.Time) []string {
	t.Helper()
	n, index, err := s.Build(has, built)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 2000)
	for i := range out {
		out[i] = s.Members[index[n.Pick(ringhash.HashKey(fmt.Sprintf("key-%d", i)), fadein.StepTime(at))]].Address
	}
	return out
}

// A client builds its ring at the last schedule change; /debug/pick builds
// it when asked. Their picks agree at every later step, also in the step
// in which a fade of a fractional duration ends: a ring built there after
// the fade's duration has passed must not fold the fade in early.
func TestBuildPicksAlikeWhenBuiltLater(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	curve := fadein.Curve{Duration: 1500 * time.Millisecond, Exponent: 1}
	s := schedule(20, 5, start, curve)
	all := func(string) bool { return true }
	for _, at := range []time.Duration{1600 * time.Millisecond, 1900 * time.Millisecond, 2500 * time.Millisecond} {
		early := pickAll(t, s, all, start.Add(200*time.Millisecond), start.Add(at))
		late := pickAll(t, s, all, start.Add(at), start.Add(at))
		differ := 0
		for i := range early {
			if early[i] != late[i] {
				differ++
			}
		}
		if differ != 0 {
			t.Errorf("picks at start+%v: a ring built then and one built at start+200ms differ on %d of %d keys", at, differ, len(early))
		}
	}
	// Proof the step of start+1.6s is mid-fade: some keys are still on an
	// old member that the final ring gives a new one.
	final := pickAll(t, s, all, start.Add(time.Hour), start.Add(time.Hour))
	mid := pickAll(t, s, all, start, start.Add(1600*time.Millisecond))
	pending := 0
	for i := range mid {
		if mid[i] != final[i] {
			pending++
		}
	}
	if pending == 0 {
		t.Fatal("at start+1.6s every key is on its final member: the case is not mid-fade")
	}
}

// Only members in EDS are on the ring: leaving one out moves only the
// keys it would own.
func TestBuildLeavesOutMembersNotInEDS(t *testing.T) {
	s := schedule(10, 0, time.Time{}, fadein.Curve{Duration: time.Second, Exponent: 1})
	gone := s.Members[3].Address
	now := time.Now()
	all := pickAll(t, s, func(string) bool { return true }, now, now)
	some := pickAll(t, s, func(a string) bool { return a != gone }, now, now)
	for i := range all {
		switch {
		case some[i] == gone:
			t.Fatalf("key %d picked %s, which is not in EDS", i, gone)
		case all[i] != gone && some[i] != all[i]:
			t.Fatalf("key %d moved from %s to %s, neither of them gone", i, all[i], some[i])
		}
	}
	if _, _, err := s.Build(func(string) bool { return false }, now); err != ErrNoneInEDS {
		t.Fatalf("no member in EDS: error %v, want ErrNoneInEDS", err)
	}
}
