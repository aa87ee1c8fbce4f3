package e2e_test

import (
	"testing"

	"github.com/ringxds/ringxds/internal/testcp"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// counter finds one series in the control plane's registry.
func counter(t *testing.T, cp *testcp.ControlPlane, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	c := counterOrZero(t, cp, name, labels)
	if c == nil {
		t.Fatalf("no series %s%v", name, labels)
	}
	return c
}

// counterOrZero finds one series in the control plane's registry, or nil
// when it was never set.
func counterOrZero(t *testing.T, cp *testcp.ControlPlane, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := cp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return constCollector{mf, m}
		}
	}
	return nil
}

// constCollector re-exposes a gathered series so testutil.ToFloat64 can
// read it.
type constCollector struct {
	mf *dto.MetricFamily
	m  *dto.Metric
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc(c.mf.GetName(), c.mf.GetHelp(), nil, nil)
}

func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.m.GetCounter().GetValue() + c.m.GetGauge().GetValue()
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.mf.GetName(), c.mf.GetHelp(), nil, nil), prometheus.UntypedValue, v)
}

func protoRegistryFind(typeURL string) (protoreflect.MessageType, error) {
	return protoregistry.GlobalTypes.FindMessageByURL(typeURL)
}
