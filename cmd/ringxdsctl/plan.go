package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/predict"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// plan is an endpoints file as xds-server would publish it, every endpoint
// established: a file names no instant an endpoint appeared, so the rings
// are those in force once any fade-in is over.
type plan struct {
	path  string
	state model.State
	snap  *snapshot.Snapshot
	at    time.Time
}

// loadPlan reads, validates and translates an endpoints file; "" is the
// embedded example xds-server serves by default.
func loadPlan(path string) (*plan, error) {
	name, data := examples.DefaultEndpointsName, examples.DefaultEndpoints
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, err
		}
		name = path
	}
	return planOf(name, data)
}

func planOf(name string, data []byte) (*plan, error) {
	// Problems come back as "file:line:column: field: problem", as
	// xds-server reports them.
	state, err := watch.ParseFile(name, data)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	snap, err := snapshot.Build(state, at)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &plan{path: name, state: state, snap: snap, at: at}, nil
}

// clusters lists the file's cluster names, sorted.
func (p *plan) clusters() []string {
	names := make([]string, 0, len(p.state.Clusters))
	for _, c := range p.state.Clusters {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

// checkCluster says which clusters exist when name is not one of them.
func (p *plan) checkCluster(name string) error {
	if _, ok := p.state.Cluster(name); ok {
		return nil
	}
	return fmt.Errorf("%s has no cluster %q; its clusters: %s", p.path, name, strings.Join(p.clusters(), ", "))
}

// ring is the ring impl picks from on the cluster, as xds-server publishes
// it: the ring the implementation decodes from its own resources.
func (p *plan) ring(impl dataplane.Implementation, cluster string) (*predict.Ring, error) {
	if why, failed := p.snap.Failed[cluster]; failed {
		return nil, fmt.Errorf("%s: cluster %q cannot be translated: %s", p.path, cluster, why)
	}
	r, err := predict.Build(p.snap, impl, cluster, p.at)
	if err != nil {
		return nil, fmt.Errorf("%s: cluster %q as %s builds it: %w", p.path, cluster, impl.Name, err)
	}
	return r, nil
}
