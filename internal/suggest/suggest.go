// Package suggest finds the names closest to a misspelled one, for
// messages that say "did you mean ...?" instead of only "unknown".
package suggest

import (
	"cmp"
	"slices"
	"strings"
)

// Likely returns the names in known within a small edit distance of got
// (a typo, a missing or extra letter, another case), closest first, at
// most n of them.
func Likely(got string, known []string, n int) []string {
	// A third of the name, at least 2 and at most 4 edits: "product" for
	// "products", not "catalog" for "inventory".
	limit := min(max(len(got)/3, 2), 4)
	return closest(got, known, n, limit)
}

// Closest returns the n names in known closest to got by edit distance,
// however far, closest first (ties by name): a short list of what exists
// when nothing is near.
func Closest(got string, known []string, n int) []string {
	return closest(got, known, n, -1)
}

func closest(got string, known []string, n, limit int) []string {
	type scored struct {
		name string
		dist int
	}
	lower := strings.ToLower(got)
	var all []scored
	for _, k := range known {
		if k == got {
			continue
		}
		d := Distance(lower, strings.ToLower(k))
		if limit >= 0 && d > limit {
			continue
		}
		all = append(all, scored{k, d})
	}
	slices.SortFunc(all, func(a, b scored) int { return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.name, b.name)) })
	out := make([]string, 0, min(n, len(all)))
	for _, s := range all {
		if len(out) == n {
			break
		}
		out = append(out, s.name)
	}
	return out
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Quote joins names as "a", "b" or "c", for a message.
func Quote(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
	}
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
