package watch

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/util/watchlist"
)

// client-go's reflectors retry a watch the API server refuses (down, or
// restarting, on a reachable address) or answers 429, with backoff, and
// do not call the informer's watch error handler for it. For a whole
// outage of that kind kubeWatchError never ran: nothing was logged and
// ringxds_kube_watch_errors_total stayed at 0 while the served State was
// frozen. kubeWatchReporter wraps the client the informers use and reports
// those watch calls itself.
type kubeWatchReporter struct {
	kubernetes.Interface
	report func(resource string, err error)
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says:
// the informers ask it to choose between a streamed list and list+watch,
// and a fake clientset, which cannot stream, says so through it.
func (c kubeWatchReporter) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.Interface)
}

func (c kubeWatchReporter) CoreV1() corev1client.CoreV1Interface {
	return kubeCoreReporter{c.Interface.CoreV1(), c.report}
}

func (c kubeWatchReporter) DiscoveryV1() discoveryv1client.DiscoveryV1Interface {
	return kubeDiscoveryReporter{c.Interface.DiscoveryV1(), c.report}
}

type kubeCoreReporter struct {
	corev1client.CoreV1Interface
	report func(resource string, err error)
}

func (c kubeCoreReporter) Services(namespace string) corev1client.ServiceInterface {
	return kubeServicesReporter{c.CoreV1Interface.Services(namespace), c.report}
}

type kubeServicesReporter struct {
	corev1client.ServiceInterface
	report func(resource string, err error)
}

func (c kubeServicesReporter) Watch(ctx context.Context, opts metav1.ListOptions) (watchapi.Interface, error) {
	w, err := c.ServiceInterface.Watch(ctx, opts)
	kubeReportRetried(c.report, "services", err)
	return w, err
}

type kubeDiscoveryReporter struct {
	discoveryv1client.DiscoveryV1Interface
	report func(resource string, err error)
}

func (c kubeDiscoveryReporter) EndpointSlices(namespace string) discoveryv1client.EndpointSliceInterface {
	return kubeSlicesReporter{c.DiscoveryV1Interface.EndpointSlices(namespace), c.report}
}

type kubeSlicesReporter struct {
	discoveryv1client.EndpointSliceInterface
	report func(resource string, err error)
}

func (c kubeSlicesReporter) Watch(ctx context.Context, opts metav1.ListOptions) (watchapi.Interface, error) {
	w, err := c.EndpointSliceInterface.Watch(ctx, opts)
	kubeReportRetried(c.report, "endpointslices", err)
	return w, err
}

// kubeReportRetried reports err when the reflector retries it by itself
// (client-go's isWatchErrorRetriable). Other errors end the reflector's
// ListAndWatch and reach kubeWatchError; reporting them here as well would
// count them twice.
func kubeReportRetried(report func(resource string, err error), resource string, err error) {
	if err != nil && (utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)) {
		report(resource, err)
	}
}
