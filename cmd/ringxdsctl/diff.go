package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

const diffSynopsis = `diff before.yaml after.yaml [--cluster name] [--keys keys.txt | --samples N [--seed S]] [-o json]

Compares, per cluster and per data plane, where each key goes with the
endpoints of before.yaml and with those of after.yaml, every endpoint
established (the rings once any fade-in is over). For each key k, b(k) is its
pod before and a(k) after; "old" pods are those in both files, "new" pods
those only in after.yaml, "removed" pods those only in before.yaml.

  moved         keys with b(k) != a(k), as a fraction of all keys
  old->old      moved keys with b(k) and a(k) both old: churn between pods that
                stay, which a perfect consistent hash avoids
  ->new         moved keys with a(k) new
  removed->old  moved keys with b(k) removed and a(k) old: the removed pods'
                keys, which must move somewhere
  fade-in warms ->new as a fraction of moved: the keys a fade-in hands to the
                new pods gradually, as their share ramps up, so their caches
                warm instead of taking their full share cold. The other moved
                keys land on a pod cold for them, fade-in or not.

With --keys, the keys are the file's lines (empty lines skipped); a key on
several lines counts as often as it appears, so a sample of real requests
weighs keys by traffic. Otherwise --samples random keys are drawn, the same
ones for the same --seed.`

// keySet is the keys a diff counts and where they come from.
type keySet struct {
	Source string `json:"source"`
	Count  int    `json:"count"`
	// Seed is set when the keys were drawn at random.
	Seed   *uint64  `json:"seed,omitempty"`
	hashes []uint64 `json:"-"`
}

// moves counts, for one cluster and data plane, the keys that move.
type moves struct {
	Client string `json:"client"`
	Policy string `json:"policy"`
	// Fractions of all keys.
	Moved        float64 `json:"moved"`
	OldToOld     float64 `json:"old_to_old"`
	ToNew        float64 `json:"to_new"`
	RemovedToOld float64 `json:"removed_to_old"`
	// FadeInWarms is ToNew / Moved, 0 when nothing moves.
	FadeInWarms float64 `json:"fade_in_warms"`
}

// clusterDiff is one cluster's comparison.
type clusterDiff struct {
	Cluster string `json:"cluster"`
	// Change is "changed", "unchanged", "added" or "removed"; an added or
	// removed cluster has no moves.
	Change string `json:"change"`
	// FadeIn is the cluster's fade-in in after.yaml, "off" without one.
	FadeIn   string  `json:"fade_in"`
	ByClient []moves `json:"by_client,omitempty"`
}

type diffOutput struct {
	Before      string            `json:"before"`
	After       string            `json:"after"`
	Keys        keySet            `json:"keys"`
	Clusters    []clusterDiff     `json:"clusters"`
	Unpredicted map[string]string `json:"unpredicted"`
}

// DefaultSamples and DefaultSeed are diff's random keys when no --keys
// file is given.
const (
	defaultSamples = 100000
	defaultSeed    = 1
)

func runDiff(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("diff", diffSynopsis, stderr)
	keysFile := fs.String("keys", "", "file of keys, one per line, to count instead of random ones")
	samples := fs.Int("samples", defaultSamples, "random keys to draw when there is no --keys file")
	seed := fs.Uint64("seed", defaultSeed, "seed of the random keys")
	cluster := fs.String("cluster", "", "compare only this cluster (default: every cluster of either file)")
	out := outputFlag(fs)
	files, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 2 {
		return usageError{error: fmt.Errorf("want two endpoints files, before and after; got %d arguments", len(files))}
	}
	if *samples < 1 {
		return usageError{error: fmt.Errorf("--samples %d: want at least 1", *samples)}
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	before, err := loadPlan(files[0])
	if err != nil {
		return err
	}
	after, err := loadPlan(files[1])
	if err != nil {
		return err
	}
	if *cluster != "" {
		if before.checkCluster(*cluster) != nil && after.checkCluster(*cluster) != nil {
			return fmt.Errorf("neither file has a cluster %q; their clusters: %s", *cluster, strings.Join(slices.Compact(slices.Sorted(slices.Values(append(before.clusters(), after.clusters()...)))), ", "))
		}
	}
	var keys keySet
	if *keysFile != "" {
		keys, err = readKeys(*keysFile)
	} else {
		keys = sampleKeys(*samples, *seed)
	}
	if err != nil {
		return err
	}
	res, err := diffPlans(before, after, keys, *cluster)
	if err != nil {
		return err
	}
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return diffTable(stdout, res)
}

// maxKeyLine bounds one line of a keys file.
const maxKeyLine = 1 << 20

// readKeys reads a keys file: one key a line, empty lines skipped.
func readKeys(path string) (keySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return keySet{}, err
	}
	defer f.Close()
	ks := keySet{Source: path}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxKeyLine)
	line := 0
	for sc.Scan() {
		line++
		k := strings.TrimSuffix(sc.Text(), "\r")
		if line == 1 {
			// Editors on some systems start a UTF-8 file with a byte
			// order mark, which would become part of the first key.
			k = strings.TrimPrefix(k, "\ufeff")
		}
		if k == "" {
			continue
		}
		ks.hashes = append(ks.hashes, ringhash.HashKey(k))
	}
	if err := sc.Err(); err != nil {
		return keySet{}, fmt.Errorf("%s:%d: %w (one key a line, at most %d bytes)", path, line+1, err, maxKeyLine)
	}
	if len(ks.hashes) == 0 {
		return keySet{}, fmt.Errorf("%s: no keys (one key a line)", path)
	}
	ks.Count = len(ks.hashes)
	return ks, nil
}

// sampleKeys draws n random keys, the same for the same seed.
func sampleKeys(n int, seed uint64) keySet {
	ks := keySet{Source: "random", Count: n, Seed: &seed, hashes: make([]uint64, n)}
	for i, k := range sampleKeyStrings(n, seed) {
		ks.hashes[i] = ringhash.HashKey(k)
	}
	return ks
}

// sampleKeyStrings are the keys sampleKeys hashes: strings, like the
// header values data planes hash, so a sample can be replayed elsewhere.
func sampleKeyStrings(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x72696e67786473)) // "ringxds"
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%016x", rng.Uint64())
	}
	return out
}

// diffPlans compares every cluster of either file, or only the one named.
func diffPlans(before, after *plan, keys keySet, only string) (diffOutput, error) {
	res := diffOutput{Before: before.path, After: after.path, Keys: keys, Unpredicted: dataplane.Unpredicted()}
	names := append(before.clusters(), after.clusters()...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		if only != "" && name != only {
			continue
		}
		b, inBefore := before.state.Cluster(name)
		a, inAfter := after.state.Cluster(name)
		cd := clusterDiff{Cluster: name, FadeIn: "off"}
		switch {
		case !inBefore:
			cd.Change = "added"
		case !inAfter:
			cd.Change = "removed"
		case b.Equal(a):
			cd.Change = "unchanged"
		default:
			cd.Change = "changed"
		}
		if inAfter && a.FadeIn != nil {
			cd.FadeIn = fmt.Sprintf("%v, exponent %g", a.FadeIn.Duration, a.FadeIn.Exponent)
		}
		if inBefore && inAfter {
			for _, impl := range dataplane.Predicted() {
				m, err := countMoves(before, after, impl, name, keys.hashes)
				if err != nil {
					return diffOutput{}, err
				}
				cd.ByClient = append(cd.ByClient, m)
			}
		}
		res.Clusters = append(res.Clusters, cd)
	}
	return res, nil
}

// countMoves counts, for one data plane, the keys whose pod differs
// between the two files' rings, by where they move.
func countMoves(before, after *plan, impl dataplane.Implementation, cluster string, hashes []uint64) (moves, error) {
	rb, err := before.ring(impl, cluster)
	if err != nil {
		return moves{}, err
	}
	ra, err := after.ring(impl, cluster)
	if err != nil {
		return moves{}, err
	}
	inBefore, inAfter := addrSet(rb.Decoded.Endpoints), addrSet(ra.Decoded.Endpoints)
	m := moves{Client: impl.Name}
	var moved, oldOld, toNew, removedOld int
	for _, h := range hashes {
		_, b := rb.Pick(h, before.at)
		policy, a := ra.Pick(h, after.at)
		m.Policy = policy
		if a == b {
			continue
		}
		moved++
		switch {
		case !inBefore[a]:
			toNew++
		case !inAfter[b]:
			removedOld++
		default:
			oldOld++
		}
	}
	n := float64(len(hashes))
	m.Moved, m.OldToOld, m.ToNew, m.RemovedToOld = float64(moved)/n, float64(oldOld)/n, float64(toNew)/n, float64(removedOld)/n
	if moved > 0 {
		m.FadeInWarms = float64(toNew) / float64(moved)
	}
	return m, nil
}

// addrSet is the pods of a ring.
func addrSet(eps []snapshot.DecodedEndpoint) map[string]bool {
	out := make(map[string]bool, len(eps))
	for _, ep := range eps {
		out[ep.Addr] = true
	}
	return out
}

func diffTable(w io.Writer, res diffOutput) error {
	what := fmt.Sprintf("%d keys from %s", res.Keys.Count, res.Keys.Source)
	if res.Keys.Seed != nil {
		// The 95% interval of a sampled fraction f is f ± 1.96·√(f(1−f)/N),
		// widest at f = ½.
		what = fmt.Sprintf("%d random keys (seed %d; each fraction within ±%.2f points at 95%%)",
			res.Keys.Count, *res.Keys.Seed, 100*1.96*math.Sqrt(0.25/float64(res.Keys.Count)))
	}
	fmt.Fprintf(w, "%s -> %s, %s\n\n", res.Before, res.After, what)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tCHANGE\tDATA PLANE\tPOLICY\tMOVED\tOLD->OLD\t->NEW\tREMOVED->OLD\tFADE-IN WARMS\tFADE-IN")
	for _, cd := range res.Clusters {
		if len(cd.ByClient) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", cd.Cluster, cd.Change, cd.FadeIn)
			continue
		}
		for _, m := range cd.ByClient {
			warms := "-"
			if m.Moved > 0 {
				warms = pct(m.FadeInWarms) + " of moved"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cd.Cluster, cd.Change, m.Client, m.Policy,
				pct(m.Moved), pct(m.OldToOld), pct(m.ToNew), pct(m.RemovedToOld), warms, cd.FadeIn)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeUnpredicted(w, res.Unpredicted)
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }
