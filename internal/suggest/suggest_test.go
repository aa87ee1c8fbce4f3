package suggest

import (
	"slices"
	"testing"
)

func TestLikelyFindsTyposOnly(t *testing.T) {
	known := []string{"products", "inventory", "catalog", "product-reviews"}
	for _, tc := range []struct {
		got  string
		want []string
	}{
		{"product", []string{"products"}},
		{"Products", []string{"products"}},
		{"invntory", []string{"inventory"}},
		{"orders", nil},
		{"products", nil}, // exact: nothing to suggest
	} {
		if got := Likely(tc.got, known, 3); !slices.Equal(got, tc.want) {
			t.Errorf("Likely(%q) = %q, want %q", tc.got, got, tc.want)
		}
	}
}

func TestClosestListsWhatExistsClosestFirst(t *testing.T) {
	got := Closest("orders", []string{"inventory", "catalog", "products", "order"}, 2)
	if !slices.Equal(got, []string{"order", "products"}) {
		t.Errorf("Closest = %q", got)
	}
	if got := Closest("x", nil, 3); len(got) != 0 {
		t.Errorf("Closest of nothing = %q", got)
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""}, {[]string{"a"}, `"a"`}, {[]string{"a", "b"}, `"a" or "b"`}, {[]string{"a", "b", "c"}, `"a", "b" or "c"`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
