package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// promSample is one line of the Prometheus text format.
type promSample struct {
	name   string
	labels string
	value  float64
}

// promText is a parsed /metrics page. The text format is simple enough that
// a line parser avoids depending on the exposition library here.
type promText []promSample

// sum adds every sample of a metric whose labels contain all of match
// (each an exact `key="value"` pair).
func (p promText) sum(name string, match ...string) float64 {
	var t float64
	for _, s := range p {
		if s.name != name {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(s.labels, m) {
				ok = false
				break
			}
		}
		if ok {
			t += s.value
		}
	}
	return t
}

func (p promText) has(name string) bool {
	for _, s := range p {
		if s.name == name {
			return true
		}
	}
	return false
}

func parseProm(r io.Reader) (promText, error) {
	var out promText
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var s promSample
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				return nil, fmt.Errorf("metrics line %q: unbalanced braces", line)
			}
			s.name, s.labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("metrics line %q: no value", line)
			}
			s.name, rest = f[0], f[1]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// debugClient reads the server's debug endpoints.
type debugClient struct {
	addr string
	http *http.Client
}

func newDebugClient(addr string) *debugClient {
	return &debugClient{addr: addr, http: &http.Client{Timeout: 10 * time.Second}}
}

func (d *debugClient) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return resp, nil
}

func (d *debugClient) metrics(ctx context.Context) (promText, error) {
	resp, err := d.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseProm(resp.Body)
}

// collectGarbage makes the server run two garbage collections, through
// net/http/pprof's heap endpoint, so that heap figures count live memory
// rather than garbage and pooled buffers (sync.Pool drops its contents over
// two collections). It reports false when the server has no pprof.
func (d *debugClient) collectGarbage(ctx context.Context) bool {
	for range 2 {
		resp, err := d.get(ctx, "/debug/pprof/heap?gc=1")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return true
}

// connectedNodes counts the open streams whose node ID has prefix.
func (d *debugClient) connectedNodes(ctx context.Context, prefix string) (int, error) {
	resp, err := d.get(ctx, "/debug/clients")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Clients []struct {
			NodeID string `json:"node_id"`
		} `json:"clients"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("decode /debug/clients: %w", err)
	}
	n := 0
	for _, c := range body.Clients {
		if strings.HasPrefix(c.NodeID, prefix) {
			n++
		}
	}
	return n, nil
}

// saveProfile saves a pprof profile from path (such as
// "/debug/pprof/profile?seconds=10") to file. It needs net/http/pprof on the
// debug address.
func (d *debugClient) saveProfile(ctx context.Context, path, file string, timeout time.Duration) error {
	hc := &http.Client{Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+path, nil)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: status %d (is net/http/pprof on the debug address?)", path, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	return nil
}

// loadAverage returns the one-minute load average, or -1 where unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// selfMaxRSSMB returns this process's peak resident memory (VmHWM), or -1
// where /proc does not tell.
func selfMaxRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if kb, err := strconv.ParseFloat(f[0], 64); err == nil && len(f) == 2 && f[1] == "kB" {
				return kb / 1024
			}
		}
	}
	return -1
}
