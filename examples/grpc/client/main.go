// Command client is the proxyless gRPC half of the ringxds demo. It dials
// xds:///products through grpc-go's own xDS resolver, so grpc-go builds the
// ring from what ringxds publishes, sends keyed RPCs, and checks every
// answer against /debug/pick?client=grpc, the ring the control plane says a
// gRPC client builds.
//
// grpc-go reads its bootstrap from the environment when the process starts,
// so set GRPC_XDS_BOOTSTRAP (a file) or GRPC_XDS_BOOTSTRAP_CONFIG (the JSON);
// --print-bootstrap prints one for --xds-server:
//
//	GRPC_XDS_BOOTSTRAP_CONFIG="$(client --print-bootstrap)" client -n 1000
//
// It exits non-zero unless every key went where /debug/pick says.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver and ring_hash
)

type config struct {
	xdsServer, debugURL, target, header, keyPrefix string
	n                                              int
	timeout                                        time.Duration
	printBootstrap                                 bool
}

func main() {
	var c config
	flag.StringVar(&c.xdsServer, "xds-server", "127.0.0.1:18000", "xDS server address, for --print-bootstrap")
	flag.StringVar(&c.debugURL, "debug", "http://127.0.0.1:18080", "base URL of the xds-server debug endpoint")
	flag.StringVar(&c.target, "target", "products", "cluster to call: the client dials xds:///TARGET")
	flag.StringVar(&c.header, "header", "x-product-id", "request header the cluster hashes on")
	flag.StringVar(&c.keyPrefix, "key-prefix", "product-", "keys are this prefix followed by 0..n-1")
	flag.IntVar(&c.n, "n", 1000, "number of keyed RPCs")
	flag.DurationVar(&c.timeout, "timeout", 60*time.Second, "give up after this long")
	flag.BoolVar(&c.printBootstrap, "print-bootstrap", false, "print a grpc-go xDS bootstrap for --xds-server and exit")
	flag.Parse()

	if c.printBootstrap {
		fmt.Println(bootstrap(c.xdsServer))
		return
	}
	if os.Getenv("GRPC_XDS_BOOTSTRAP") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "" {
		fmt.Fprintf(os.Stderr, "client: grpc-go needs an xDS bootstrap: set GRPC_XDS_BOOTSTRAP to a file or GRPC_XDS_BOOTSTRAP_CONFIG to JSON, e.g.\n  GRPC_XDS_BOOTSTRAP_CONFIG=%q %s\n", bootstrap(c.xdsServer), strings.Join(os.Args, " "))
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ok, err := run(ctx, c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// bootstrap is the smallest bootstrap grpc-go accepts: one xDS server with
// insecure credentials. The node ID only names the client on the debug page.
func bootstrap(xdsServer string) string {
	b, _ := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      xdsServer,
			"channel_creds":   []any{map[string]string{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]string{"id": "ringxds-demo-client", "cluster": "demo"},
	})
	return string(b)
}

// run sends the keyed RPCs and compares each answer with /debug/pick. It
// reports whether all agreed.
func run(ctx context.Context, c config, out io.Writer) (bool, error) {
	if err := waitReady(ctx, c.debugURL); err != nil {
		return false, err
	}
	cc, err := grpc.NewClient("xds:///"+c.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, fmt.Errorf("dial xds:///%s: %w", c.target, err)
	}
	defer cc.Close()
	svc := testgrpc.NewTestServiceClient(cc)

	served := map[string]int{}
	want := map[string]int{}
	agree := 0
	var mismatches []string
	for i := range c.n {
		key := c.keyPrefix + fmt.Sprint(i)
		rctx := metadata.AppendToOutgoingContext(ctx, c.header, key)
		// WaitForReady: the first RPCs wait for xDS resources and for the
		// picked backend's connection instead of failing fast.
		resp, err := svc.UnaryCall(rctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return false, fmt.Errorf("RPC for key %q: %w", key, err)
		}
		got := resp.GetHostname()
		expected, err := pick(ctx, c.debugURL, c.target, key)
		if err != nil {
			return false, err
		}
		served[got]++
		want[expected]++
		if got == expected {
			agree++
		} else if len(mismatches) < 10 {
			mismatches = append(mismatches, fmt.Sprintf("  key %q: served by %s, /debug/pick says %s", key, got, expected))
		}
	}

	addrs := make([]string, 0, len(want))
	for a := range want {
		addrs = append(addrs, a)
	}
	for a := range served {
		if _, ok := want[a]; !ok {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	fmt.Fprintf(out, "%d keys (%s0..%s%d, header %s) sent to xds:///%s\n", c.n, c.keyPrefix, c.keyPrefix, c.n-1, c.header, c.target)
	fmt.Fprintf(out, "  %-22s %8s %18s\n", "backend", "served", "/debug/pick says")
	for _, a := range addrs {
		fmt.Fprintf(out, "  %-22s %8d %18d\n", a, served[a], want[a])
	}
	for _, m := range mismatches {
		fmt.Fprintln(out, m)
	}
	fmt.Fprintf(out, "agreement %d/%d\n", agree, c.n)
	return agree == c.n, nil
}

// waitReady polls /readyz until the control plane has published a snapshot.
func waitReady(ctx context.Context, debugURL string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, debugURL+"/readyz", nil)
		if err != nil {
			return fmt.Errorf("readyz: %w", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("xds-server at %s not ready: %w (last error: %v)", debugURL, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pick asks the control plane which endpoint a gRPC client picks for key.
func pick(ctx context.Context, debugURL, cluster, key string) (string, error) {
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {"grpc"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, debugURL+"/debug/pick?"+q.Encode(), nil)
	if err != nil {
		return "", fmt.Errorf("pick %q: %w", key, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("pick %q: %w", key, err)
	}
	defer resp.Body.Close()
	var res struct {
		Endpoint string `json:"endpoint"`
		Error    string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return "", fmt.Errorf("pick %q: status %d: %w", key, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || res.Endpoint == "" {
		return "", fmt.Errorf("pick %q: status %d: %w", key, resp.StatusCode, errors.New(res.Error))
	}
	return res.Endpoint, nil
}
