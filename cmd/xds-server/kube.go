package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ringxds/ringxds/internal/watch"
)

// newKubeSource connects to the API server named by --kubeconfig, or the
// in-cluster one, and checks the connection before serving, so a missing
// permission fails start-up rather than every watch.
func newKubeSource(_ context.Context, cfg config, log *zap.Logger, reg prometheus.Registerer) (watch.Source, error) {
	var (
		rc  *rest.Config
		err error
	)
	if cfg.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes config (pass --kubeconfig outside a cluster): %w", err)
	}
	rc.UserAgent = "ringxds-xds-server"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("reach the Kubernetes API server at %s: %w", rc.Host, err)
	}
	return watch.NewKubeSource(client, watch.KubeOptions{
		Namespace:       cfg.namespace,
		ServiceSelector: cfg.serviceSelector,
		Debounce:        cfg.debounce,
		Logger:          log.Named("kubernetes"),
		Registerer:      reg,
	})
}
