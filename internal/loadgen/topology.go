package loadgen

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// firstPort is the port every endpoint starts on; changes move endpoints to
// ports above it, each used once, so no endpoint set ever repeats and every
// set the file held identifies exactly one point in its cluster's history.
const firstPort = 8080

// topology is the endpoints file the tool writes and the history of every
// cluster in it. Clients look up what they receive here.
type topology struct {
	path string

	mu       sync.RWMutex
	clusters []*clusterHistory
	byName   map[string]int
	nextPort int
	// size is the longest rendering so far, to allocate the next at once.
	size int
}

// clusterHistory is one cluster: its fixed addresses, its current ports and
// every endpoint set the file has held for it, oldest first.
type clusterHistory struct {
	name  string
	addrs []string
	ports []int
	gens  []generation
	byFP  map[uint64]int
}

// generation is one endpoint set of a cluster as written to the file.
type generation struct {
	fp uint64
	// writtenAt is when the write that introduced it began.
	writtenAt time.Time
	// endpoints is the size of the set.
	endpoints int
}

// newTopology spreads endpoints over clusters as evenly as possible; every
// address is a distinct 10.x.y.z literal.
func newTopology(path string, clusters, endpoints int) (*topology, error) {
	if clusters < 1 || endpoints < clusters {
		return nil, fmt.Errorf("need at least one cluster and one endpoint per cluster (clusters=%d endpoints=%d)", clusters, endpoints)
	}
	if endpoints > 1<<24-2 {
		return nil, fmt.Errorf("endpoints=%d exceeds the 10.0.0.0/8 addresses the tool assigns", endpoints)
	}
	t := &topology{path: path, byName: make(map[string]int, clusters), nextPort: firstPort + 1}
	k := 0
	for i := range clusters {
		n := endpoints / clusters
		if i < endpoints%clusters {
			n++
		}
		c := &clusterHistory{name: fmt.Sprintf("svc-%04d", i), byFP: map[uint64]int{}}
		for range n {
			k++
			c.addrs = append(c.addrs, fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255))
			c.ports = append(c.ports, firstPort)
		}
		c.record(time.Time{})
		t.byName[c.name] = i
		t.clusters = append(t.clusters, c)
	}
	return t, nil
}

// record appends the current ports as a new generation.
func (c *clusterHistory) record(at time.Time) int {
	eps := make([]string, len(c.addrs))
	for i, a := range c.addrs {
		eps[i] = a + ":" + strconv.Itoa(c.ports[i])
	}
	fp := fingerprint(eps)
	c.gens = append(c.gens, generation{fp: fp, writtenAt: at, endpoints: len(eps)})
	c.byFP[fp] = len(c.gens) - 1
	return len(c.gens) - 1
}

// fingerprint identifies an endpoint set independently of order.
func fingerprint(hostPorts []string) uint64 {
	slices.Sort(hostPorts)
	d := xxhash.New()
	for _, hp := range hostPorts {
		_, _ = d.WriteString(hp)
		_, _ = d.Write([]byte{'\n'})
	}
	return d.Sum64()
}

// change moves one to three endpoints of a random cluster to fresh ports,
// records the new generation as written now and writes the file. It returns
// the cluster and the generation.
func (t *topology) change(rng *rand.Rand) (cluster, gen int, err error) {
	t.mu.Lock()
	cluster = rng.IntN(len(t.clusters))
	c := t.clusters[cluster]
	n := min(1+rng.IntN(3), len(c.addrs))
	for _, i := range rng.Perm(len(c.addrs))[:n] {
		c.ports[i] = t.nextPort
		t.nextPort++
		if t.nextPort > 65535 {
			t.nextPort = firstPort + 1
		}
	}
	gen = c.record(time.Now())
	data := t.renderLocked()
	t.mu.Unlock()
	return cluster, gen, t.write(data)
}

// render returns the file content for the current state.
func (t *topology) render() []byte {
	t.mu.Lock() // renderLocked notes the size
	defer t.mu.Unlock()
	return t.renderLocked()
}

// renderLocked appends rather than formats: a change's clock starts
// before the file is rendered, so rendering 10,000 endpoints with fmt would
// add milliseconds to every propagation figure, and CPU beside the server.
func (t *topology) renderLocked() []byte {
	b := make([]byte, 0, t.size)
	b = append(b, "# Written by xds-loadgen; rewritten on every simulated change.\nclusters:\n"...)
	for _, c := range t.clusters {
		b = append(b, "  - name: "...)
		b = append(b, c.name...)
		b = append(b, "\n    endpoints:\n"...)
		for i, a := range c.addrs {
			b = append(b, "      - {address: "...)
			b = append(b, a...)
			b = append(b, ", port: "...)
			b = strconv.AppendInt(b, int64(c.ports[i]), 10)
			b = append(b, "}\n"...)
		}
	}
	t.size = max(t.size, len(b))
	return b
}

// write replaces the file atomically (temporary file and rename in the same
// directory), so the server never reads a half-written file.
func (t *topology) write(data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(t.path), ".xds-loadgen-*")
	if err != nil {
		return fmt.Errorf("write endpoints file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write endpoints file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write endpoints file: %w", err)
	}
	if err := os.Rename(tmp.Name(), t.path); err != nil {
		return fmt.Errorf("write endpoints file: %w", err)
	}
	return nil
}

// lookup returns the cluster index of name and the generation whose
// endpoint set has fingerprint fp, or -1 for content never written.
func (t *topology) lookup(name string, fp uint64) (cluster, gen int) {
	ci, ok := t.byName[name]
	if !ok {
		return -1, -1
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	g, ok := t.clusters[ci].byFP[fp]
	if !ok {
		return ci, -1
	}
	return ci, g
}

// latest returns the newest generation of every cluster.
func (t *topology) latest() []int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]int, len(t.clusters))
	for i, c := range t.clusters {
		out[i] = len(c.gens) - 1
	}
	return out
}

// writtenAt returns when generation gen of cluster ci was written.
func (t *topology) writtenAt(ci, gen int) time.Time {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.clusters[ci].gens[gen].writtenAt
}

func (t *topology) names() []string {
	out := make([]string, len(t.clusters))
	for i, c := range t.clusters {
		out[i] = c.name
	}
	return out
}
