package ringhash

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ownership returns each endpoint's share of the 2^64 hash circle, computed
// exactly from arc lengths: entry i owns the keys in (hash[i-1], hash[i]],
// and entry 0 also the wrap-around arc above the last entry.
func ownership(d Drawable, n int) []float64 {
	var hashes []uint64
	var owners []int
	d.Entries(func(h uint64, ep int) { hashes = append(hashes, h); owners = append(owners, ep) })
	share := make([]float64, n)
	for i, h := range hashes {
		prev := hashes[(i+len(hashes)-1)%len(hashes)]
		share[owners[i]] += float64(h - prev) // modular: the wrap arc for i == 0
	}
	return share
}

// Skipper's 100 virtual nodes keep the most loaded endpoint within the
// bounds anchors.md measured for 100-vnode rings.
func TestSkipperOwnershipBalance(t *testing.T) {
	for _, c := range []struct {
		n     int
		limit float64
	}{{10, 1.35}, {100, 1.45}, {1000, 1.55}} {
		eps, _ := benchEndpoints(c.n)
		share := ownership(mustSkipper(t, eps), c.n)
		mean := math.Exp2(64) / float64(c.n)
		hi, total := 0.0, 0.0
		for _, s := range share {
			hi = max(hi, s)
			total += s
		}
		if math.Abs(total-math.Exp2(64)) > math.Exp2(64)*1e-9 {
			t.Fatalf("n=%d: shares sum to %g, not the whole circle", c.n, total)
		}
		if ratio := hi / mean; ratio >= c.limit {
			t.Errorf("n=%d: max/mean ownership %.3f, want < %.2f", c.n, ratio, c.limit)
		} else {
			t.Logf("n=%d: max/mean ownership %.3f", c.n, ratio)
		}
	}
}

// probeHashes are request hashes spread over the whole circle.
func probeHashes() []uint64 {
	rng := rand.New(rand.NewPCG(9, 10))
	hs := make([]uint64, 100000)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	return hs
}

// stabilityCase builds one dialect's ring over a subset of a fixed universe
// of endpoints and reports picks as universe indices.
type stabilityCase struct {
	name  string
	build func(t *testing.T, eps []Endpoint) Ring
	eps   []Endpoint
}

func stabilityCases() []stabilityCase {
	sk, envoy := benchEndpoints(60)
	return []stabilityCase{
		{"skipper", func(t *testing.T, eps []Endpoint) Ring { return mustSkipper(t, eps) }, sk},
		{"ring_hash", func(t *testing.T, eps []Endpoint) Ring {
			// 64 entries per host whatever the host count: the condition
			// under which ring_hash membership changes are minimal.
			size := uint64(64 * len(eps))
			r := mustRingHash(t, eps, RingHashOptions{MinRingSize: size, MaxRingSize: size})
			for ep, c := range entryCounts(r, len(eps)) {
				if c != 64 {
					t.Fatalf("host %d has %d entries, want 64", ep, c)
				}
			}
			return r
		}, envoy},
	}
}

// Removing an endpoint moves exactly the keys it owned, each to the next
// endpoint clockwise, and no key moves between survivors.
func TestRemovingEndpointMovesOnlyItsKeys(t *testing.T) {
	probes := probeHashes()
	for _, c := range stabilityCases() {
		t.Run(c.name, func(t *testing.T) {
			old := c.build(t, c.eps)
			for _, removed := range []int{0, 17, len(c.eps) - 1} {
				survivors := append(append([]Endpoint{}, c.eps[:removed]...), c.eps[removed+1:]...)
				toUniverse := func(i int) int {
					if i >= removed {
						return i + 1
					}
					return i
				}
				cur := c.build(t, survivors)
				moved := 0
				for _, h := range probes {
					before, after := old.Pick(h), toUniverse(cur.Pick(h))
					if before != removed {
						if after != before {
							t.Fatalf("removing %d moved hash %d from survivor %d to %d", removed, h, before, after)
						}
						continue
					}
					moved++
					// The orphaned key goes where the old ring's walk goes next.
					next := -1
					old.Walk(h, func(ep int) bool {
						if ep == removed {
							return true
						}
						next = ep
						return false
					})
					if after != next {
						t.Fatalf("removing %d moved hash %d to %d, want the next endpoint %d", removed, h, after, next)
					}
				}
				if moved == 0 {
					t.Fatalf("endpoint %d owned none of %d probes", removed, len(probes))
				}
			}
		})
	}
}

// Adding an endpoint moves keys only to the new endpoint.
func TestAddingEndpointMovesKeysOnlyToIt(t *testing.T) {
	probes := probeHashes()
	for _, c := range stabilityCases() {
		t.Run(c.name, func(t *testing.T) {
			added := len(c.eps) - 1
			old := c.build(t, c.eps[:added])
			cur := c.build(t, c.eps)
			gained := 0
			for _, h := range probes {
				before, after := old.Pick(h), cur.Pick(h)
				if after == added {
					gained++
				} else if after != before {
					t.Fatalf("adding moved hash %d from %d to %d", h, before, after)
				}
			}
			if gained == 0 {
				t.Fatalf("the new endpoint gained none of %d probes", len(probes))
			}
		})
	}
}
