package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
)

// exampleWithOneMore is the embedded example with a fourth products
// endpoint, the change the issue asks diff to answer for.
func exampleWithOneMore(t *testing.T) (before, after string) {
	t.Helper()
	before = string(examples.DefaultEndpoints)
	const last = "      - {address: 127.0.0.1, port: 9103, weight: 2, scheme: http, zone: eu-central-1c}\n"
	if strings.Count(before, last) != 1 {
		t.Fatalf("the example no longer lists %q once", last)
	}
	after = strings.Replace(before, last, last+"      - {address: 127.0.0.1, port: 9104, weight: 1, scheme: http, zone: eu-central-1a}\n", 1)
	return before, after
}

// owners is where each key goes, per cluster and data plane.
type owners map[string]map[string][]string

// serverOwners asks a running server's /debug/pick where every key goes.
func serverOwners(cp *testcp.ControlPlane, clusters, keys []string) owners {
	out := owners{}
	for _, c := range clusters {
		out[c] = map[string][]string{}
		for _, k := range keys {
			for client, ep := range cp.Pick(c, k, dataplane.Clientlib).ByClient {
				out[c][client] = append(out[c][client], ep)
			}
		}
	}
	return out
}

// ringxdsctl diff with the example plus one endpoint prints, for the keys
// of a keys file, exactly the moves a running server makes: its
// /debug/pick before the change and after the new endpoint's fade-in, which
// the server's clock is moved past, counted here key by key.
func TestDiffMatchesTheServerAfterTheFade(t *testing.T) {
	beforeYAML, afterYAML := exampleWithOneMore(t)
	keys := make([]string, 600)
	for i := range keys {
		keys[i] = fmt.Sprintf("product-%d", i)
	}
	keysFile := writeFile(t, "keys.txt", strings.Join(keys, "\n")+"\n")
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	cp := testcp.Start(t, testcp.TempFile(t, beforeYAML), testcp.WithClock(clock))
	clusters := []string{"catalog", "inventory", "products"}
	was := serverOwners(cp, clusters, keys)

	testcp.WriteFile(t, cp.File, afterYAML)
	testcp.WaitFor(t, 10*time.Second, "the new endpoint to fade in", func() bool {
		return len(cp.Server.Current().Fading["products"]) == 1
	})
	skew.Store(int64(time.Hour))
	testcp.WaitFor(t, 10*time.Second, "the fade to end", func() bool {
		return len(cp.Server.Current().Fading["products"]) == 0
	})
	now := serverOwners(cp, clusters, keys)

	var got diffOutput
	ctlJSON(t, &got, "diff", writeFile(t, "before.yaml", beforeYAML), writeFile(t, "after.yaml", afterYAML), "--keys", keysFile)
	if got.Keys.Count != len(keys) || got.Keys.Seed != nil {
		t.Fatalf("keys %+v, want the %d of the file", got.Keys, len(keys))
	}
	for _, cd := range got.Clusters {
		for _, m := range cd.ByClient {
			b, a := was[cd.Cluster][m.Client], now[cd.Cluster][m.Client]
			want := count(b, a)
			want.Client, want.Policy = m.Client, m.Policy
			if m != want {
				t.Errorf("%s %s: ringxdsctl %+v, server %+v", cd.Cluster, m.Client, m, want)
			}
			if cd.Cluster == "products" && (m.ToNew == 0 || m.Moved == 0) || cd.Cluster != "products" && m.Moved != 0 {
				t.Errorf("%s %s: %+v: the change was not seen", cd.Cluster, m.Client, m)
			}
		}
	}
	if len(got.Clusters) != 3 || got.Clusters[2].Change != "changed" || got.Clusters[0].Change != "unchanged" {
		t.Errorf("clusters %+v", got.Clusters)
	}
}

// count classifies moves between two owner lists as diff defines them:
// pods present in both are old, pods only in a are new.
func count(b, a []string) moves {
	inB, inA := map[string]bool{}, map[string]bool{}
	for i := range b {
		inB[b[i]], inA[a[i]] = true, true
	}
	var moved, toNew, removedOld, oldOld int
	for i := range b {
		switch {
		case b[i] == a[i]:
			continue
		case !inB[a[i]]:
			toNew++
		case !inA[b[i]]:
			removedOld++
		default:
			oldOld++
		}
		moved++
	}
	n := float64(len(b))
	m := moves{Moved: float64(moved) / n, OldToOld: float64(oldOld) / n, ToNew: float64(toNew) / n, RemovedToOld: float64(removedOld) / n}
	if moved > 0 {
		m.FadeInWarms = float64(toNew) / float64(moved)
	}
	return m
}

// With random keys, diff's fractions lie within sampling error of the
// exact ones, measured on the rings themselves over the whole hash space:
// the new endpoint's share of the new ring, and the part of the hash space
// whose owner changes.
func TestDiffSampledAgreesWithTheRings(t *testing.T) {
	beforeYAML, afterYAML := exampleWithOneMore(t)
	beforeFile, afterFile := writeFile(t, "before.yaml", beforeYAML), writeFile(t, "after.yaml", afterYAML)
	var got diffOutput
	ctlJSON(t, &got, "diff", beforeFile, afterFile)
	if got.Keys.Count != defaultSamples || got.Keys.Seed == nil || *got.Keys.Seed != defaultSeed {
		t.Fatalf("keys %+v, want %d random keys of seed %d", got.Keys, defaultSamples, defaultSeed)
	}
	before, err := loadPlan(beforeFile)
	if err != nil {
		t.Fatal(err)
	}
	after, err := loadPlan(afterFile)
	if err != nil {
		t.Fatal(err)
	}
	impl := dataplane.Predicted()[0]
	rb, err := before.ring(impl, "products")
	if err != nil {
		t.Fatal(err)
	}
	ra, err := after.ring(impl, "products")
	if err != nil {
		t.Fatal(err)
	}
	newShare := ringhash.Shares(ra.Decoded.Ring)[slices.IndexFunc(ra.Decoded.Endpoints, func(e snapshot.DecodedEndpoint) bool { return e.Addr == "127.0.0.1:9104" })]
	moved := exactMoved(rb.Decoded.Ring, ra.Decoded.Ring, func(i int) string { return rb.Decoded.Endpoints[i].Addr }, func(i int) string { return ra.Decoded.Endpoints[i].Addr })
	var m moves
	for _, cd := range got.Clusters {
		if cd.Cluster == "products" {
			m = cd.ByClient[0]
		}
	}
	within := func(what string, sampled, exact float64) {
		t.Helper()
		// Four standard errors: a false alarm about once in 16,000 runs,
		// were the seed not fixed.
		if tol := 4 * math.Sqrt(exact*(1-exact)/defaultSamples); math.Abs(sampled-exact) > tol {
			t.Errorf("%s: sampled %.4f, exact %.4f (tolerance %.4f)", what, sampled, exact, tol)
		}
	}
	if m.Client != impl.Name {
		t.Fatalf("no %s row for products: %+v", impl.Name, got.Clusters)
	}
	within("->new", m.ToNew, newShare)
	within("moved", m.Moved, moved)
	t.Logf("products on %s: moved %.4f (exact %.4f), ->new %.4f (exact share %.4f), old->old %.4f", impl.Name, m.Moved, moved, m.ToNew, newShare, m.OldToOld)
}

// exactMoved is the fraction of the hash space whose owner differs between
// two rings: between consecutive entry hashes of either ring, each ring has
// one owner, asked of the ring at the middle of the interval.
func exactMoved(rb, ra ringhash.Ring, addrB, addrA func(int) string) float64 {
	var points []uint64
	for _, r := range []ringhash.Ring{rb, ra} {
		r.(ringhash.Drawable).Entries(func(h uint64, _ int) { points = append(points, h) })
	}
	slices.Sort(points)
	points = slices.Compact(points)
	var moved float64
	prev := points[len(points)-1] // the interval wraps around zero
	for _, p := range points {
		length := p - prev // modulo 2^64
		mid := prev + max(length/2, 1)
		if addrB(rb.Pick(mid)) != addrA(ra.Pick(mid)) {
			moved += float64(length)
		}
		prev = p
	}
	return moved / math.Exp2(64)
}

// A keys file weighs each key by its lines; clusters only in one file are
// named added or removed; mistakes name the file and line.
func TestDiffKeysFileAndClusterChanges(t *testing.T) {
	beforeYAML, afterYAML := exampleWithOneMore(t)
	before := writeFile(t, "before.yaml", beforeYAML)
	// after.yaml: the new endpoint, and catalog dropped.
	i := strings.Index(afterYAML, "  # skipper:")
	if i < 0 {
		t.Fatal("the example has no skipper section")
	}
	after := writeFile(t, "after.yaml", afterYAML[:i])
	keys := writeFile(t, "keys.txt", "hot\r\nhot\n\nhot\ncold\n")
	var got diffOutput
	ctlJSON(t, &got, "diff", "--keys", keys, before, after)
	if got.Keys.Count != 4 || got.Keys.Source != keys {
		t.Fatalf("keys %+v, want 4 (hot three times, cold once)", got.Keys)
	}
	for _, cd := range got.Clusters {
		switch cd.Cluster {
		case "catalog":
			if cd.Change != "removed" || len(cd.ByClient) != 0 {
				t.Errorf("catalog: %+v, want removed", cd)
			}
		case "products":
			for _, m := range cd.ByClient {
				// Each fraction counts four requests: hot weighs three.
				for _, f := range []float64{m.Moved, m.ToNew, m.OldToOld} {
					if f != 0 && f != 0.25 && f != 0.75 && f != 1 {
						t.Errorf("products %s: %+v, want quarters", m.Client, m)
					}
				}
			}
			if cd.FadeIn != "30s, exponent 2.5" {
				t.Errorf("products fade-in %q", cd.FadeIn)
			}
		}
	}
	out, _, code := ctl(t, "diff", "--keys", keys, before, after)
	if code != 0 || !strings.Contains(out, "catalog    removed") || !strings.Contains(out, "4 keys from "+keys) {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
	ctlJSON(t, &got, "diff", "--keys", keys, before, after, "--cluster", "products")
	if len(got.Clusters) != 1 || got.Clusters[0].Cluster != "products" || len(got.Clusters[0].ByClient) != len(dataplane.Predicted()) {
		t.Errorf("--cluster products: %+v", got.Clusters)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"diff", before}, 2, "want two endpoints files"},
		{[]string{"diff", before, after, "--cluster", "prodcts"}, 1, `neither file has a cluster "prodcts"; their clusters: catalog, inventory, products`},
		{[]string{"diff", before, after, "--samples", "0"}, 2, "--samples 0"},
		{[]string{"diff", before, after, "--keys", writeFile(t, "empty.txt", "\n\n")}, 1, "empty.txt: no keys"},
		{[]string{"diff", before, after, "--keys", writeFile(t, "long.txt", "a\n"+strings.Repeat("x", maxKeyLine+1)+"\n")}, 1, "long.txt:2: "},
		{[]string{"diff", before, writeFile(t, "typo.yaml", "clusters:\n  - name: products\n    lb_polcy: maglev\n")}, 1, "typo.yaml:3:"},
	} {
		if _, stderr, code := ctl(t, tc.args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// A pod replaced by another (one removed, one added): diff's counts are
// those of pick's answers before and after, key by key.
func TestDiffAgreesWithPick(t *testing.T) {
	beforeYAML := string(examples.DefaultEndpoints)
	afterYAML := strings.Replace(beforeYAML, "port: 9101, weight: 1", "port: 9105, weight: 1", 1)
	if afterYAML == beforeYAML {
		t.Fatal("the example has no 9101 endpoint of weight 1")
	}
	before, after := writeFile(t, "before.yaml", beforeYAML), writeFile(t, "after.yaml", afterYAML)
	keys := sampleKeyStrings(300, 7)
	picks := func(file string) map[string][]string {
		args := []string{"pick", "--file", file, "--cluster", "products"}
		for _, k := range keys {
			args = append(args, "--key", k)
		}
		var out pickOutput
		ctlJSON(t, &out, args...)
		by := map[string][]string{}
		for _, a := range out.Picks {
			for client, ep := range a.ByClient {
				by[client] = append(by[client], ep)
			}
		}
		return by
	}
	was, now := picks(before), picks(after)
	var got diffOutput
	ctlJSON(t, &got, "diff", before, after, "--keys", writeFile(t, "keys.txt", strings.Join(keys, "\n")))
	for _, cd := range got.Clusters {
		if cd.Cluster != "products" {
			continue
		}
		for _, m := range cd.ByClient {
			want := count(was[m.Client], now[m.Client])
			want.Client, want.Policy = m.Client, m.Policy
			if m != want || m.RemovedToOld == 0 || m.ToNew == 0 {
				t.Errorf("%s: diff %+v, from picks %+v", m.Client, m, want)
			}
		}
	}
}
