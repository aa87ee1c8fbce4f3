package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/watch"
)

func TestLimitFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, f := range []string{"-max-streams-per-connection", "-max-names-per-stream", "-max-names-per-connection",
		"-max-requests-per-second", "-request-burst", "-max-message-bytes", "-max-new-connections-per-second", "-new-connection-burst",
		"-kube-max-ring-size"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
	err := run(context.Background(), []string{"--max-names-per-stream=-1", "--xds-addr=127.0.0.1:0", "--debug-addr=127.0.0.1:0"}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--max-names-per-stream") {
		t.Errorf("a negative limit gave %v", err)
	}
}

// --kube-max-ring-size defaults to 65536, reaches the Kubernetes source,
// and refuses 0 (which must not silently lift a cap on tenant input),
// negative values and anything above Envoy's limit, naming the flag.
func TestKubeMaxRingSizeFlag(t *testing.T) {
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &help, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	if !regexp.MustCompile(`-kube-max-ring-size int\n(?s:.*?)\(default 65536\)`).MatchString(help.String()) {
		t.Errorf("--help does not show --kube-max-ring-size with its default 65536:\n%s", help.String())
	}
	for _, tc := range []struct {
		args []string
		want uint64
	}{
		{nil, watch.DefaultKubeMaxRingSize},
		{[]string{"--kube-max-ring-size=4096"}, 4096},
		{[]string{"--kube-max-ring-size=1"}, 1},
		{[]string{"--kube-max-ring-size=8388608"}, model.MaxRingSize},
	} {
		cfg, err := parseFlags(append([]string{"--source=kubernetes"}, tc.args...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := kubeOptions(cfg, zap.NewNop(), nil).MaxRingSize; got != tc.want {
			t.Errorf("%v: the source gets max ring size %d, want %d", tc.args, got, tc.want)
		}
	}
	for _, v := range []string{"0", "-1", "8388609"} {
		_, err := parseFlags([]string{"--source=kubernetes", "--kube-max-ring-size=" + v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--kube-max-ring-size "+v) || !strings.Contains(err.Error(), "1..8388608") {
			t.Errorf("--kube-max-ring-size=%s gave %v, want an error naming the flag and the range", v, err)
		}
	}
}

// The limit flags reach the served gRPC server.
func TestLimitFlagsAreEnforced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--log-level=error", "--max-streams-per-connection=1"}, io.Discard, lis)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + lis.debug.Addr().String() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cc, err := grpc.NewClient(lis.xds.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	open := func() (*discovery.DiscoveryResponse, error) {
		st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
		if err != nil {
			return nil, err
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}); err != nil {
			return nil, err
		}
		return st.Recv()
	}
	if _, err := open(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	_, err = open()
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-streams-per-connection") {
		t.Fatalf("second stream on the connection: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
