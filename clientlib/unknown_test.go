package clientlib_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ringxds/ringxds/clientlib"
)

// A misspelled cluster is not a dead server: the error names the cluster
// and the published name a typo away, and the client logs it while it
// waits.
func TestUnknownClusterSuggestsAPublishedName(t *testing.T) {
	backends := startBackends(t, 1)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	core, logs := observer.New(zap.InfoLevel)
	c := dial(t, cp.XDSAddr, clientlib.WithLogger(zap.New(core)))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := c.Balancer(ctx, "product")
	if !errors.Is(err, clientlib.ErrNotReady) || !errors.Is(err, clientlib.ErrUnknownCluster) ||
		!strings.Contains(err.Error(), `"product" (did you mean "products"?)`) {
		t.Fatalf("a misspelled cluster: %v, want ErrUnknownCluster naming products", err)
	}
	warned := logs.FilterMessageSnippet("does not publish this cluster")
	if warned.Len() != 1 || warned.All()[0].Level != zap.WarnLevel {
		t.Errorf("logged %d times: %v", warned.Len(), warned.All())
	}
	// A caller retrying the same name with short deadlines keeps being
	// told, without the client listing every cluster again: each failed
	// call releases its balancer, and the server does not answer a name
	// it lacks twice.
	for i := range 3 {
		retry, cancelRetry := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.Balancer(retry, "product")
		cancelRetry()
		if !errors.Is(err, clientlib.ErrUnknownCluster) || !strings.Contains(err.Error(), `did you mean "products"?`) {
			t.Fatalf("retry %d of a misspelled cluster: %v, want ErrUnknownCluster naming products", i, err)
		}
	}
	if n := logs.FilterMessageSnippet("does not publish this cluster").Len(); n != 1 {
		t.Errorf("the retries listed the clusters again: %d warnings", n)
	}

	// Nothing near: the error still names the cluster, without a guess.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel2()
	_, err = c.Balancer(ctx2, "orders")
	if !errors.Is(err, clientlib.ErrUnknownCluster) || !strings.Contains(err.Error(), `"orders"`) || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("an unrelated unknown cluster: %v", err)
	}
}
