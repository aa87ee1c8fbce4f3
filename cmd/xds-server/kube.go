package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ringxds/ringxds/internal/watch"
)

// kubeCheckTimeout bounds the start-up permission check, so that an API
// server that accepts connections but never answers fails start-up instead
// of hanging it.
const kubeCheckTimeout = 30 * time.Second

// newKubeSource connects to the API server named by --kubeconfig, or the
// in-cluster one, and checks its permissions before serving, so a missing
// grant fails start-up with its name rather than leaving every watch
// retrying and the pod unready without a word.
func newKubeSource(ctx context.Context, cfg config, log *zap.Logger, reg prometheus.Registerer) (watch.Source, error) {
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
	checkCtx, cancel := context.WithTimeout(ctx, kubeCheckTimeout)
	defer cancel()
	if err := kubeCheckAccess(checkCtx, client, rc.Host, cfg.namespace, log); err != nil {
		return nil, err
	}
	return watch.NewKubeSource(client, kubeOptions(cfg, log, reg))
}

// kubeOptions are the Kubernetes source's options from the command line.
func kubeOptions(cfg config, log *zap.Logger, reg prometheus.Registerer) watch.KubeOptions {
	return watch.KubeOptions{
		Namespace:       cfg.namespace,
		ServiceSelector: cfg.serviceSelector,
		Debounce:        cfg.debounce,
		// parseFlags has checked it is in 1..model.MaxRingSize.
		MaxRingSize: uint64(cfg.kubeMaxRingSize),
		Logger:      log.Named("kubernetes"),
		Registerer:  reg,
	}
}

// kubeAccess is one permission the Kubernetes source needs.
type kubeAccess struct{ verb, group, resource string }

func (a kubeAccess) String() string {
	if a.group == "" {
		return a.verb + " " + a.resource
	}
	return a.verb + " " + a.resource + "." + a.group
}

// kubeNeeded is what the source's informers do: list, then watch, Services
// and EndpointSlices. deploy/base/rbac.yaml grants it.
var kubeNeeded = []kubeAccess{
	{"list", "", "services"},
	{"watch", "", "services"},
	{"list", "discovery.k8s.io", "endpointslices"},
	{"watch", "discovery.k8s.io", "endpointslices"},
}

// kubeCheckAccess asks the API server (SelfSubjectAccessReview) whether
// these credentials may do everything in kubeNeeded in namespace ("" is all
// namespaces), and names whatever is missing. Where the review itself is
// forbidden (a hardened cluster without the system:basic-user binding) it
// falls back to listing, which is what the informers do first.
func kubeCheckAccess(ctx context.Context, client kubernetes.Interface, host, namespace string, log *zap.Logger) error {
	var missing []string
	for _, a := range kubeNeeded {
		allowed, err := kubeAllowed(ctx, client, namespace, a)
		if apierrors.IsForbidden(err) {
			log.Warn("may not create SelfSubjectAccessReviews; checking by listing instead, and watch permissions go unchecked", zap.Error(err))
			return kubeCheckByListing(ctx, client, host, namespace)
		}
		if err != nil {
			return kubeCheckError(host, err)
		}
		if !allowed {
			missing = append(missing, a.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return kubeMissingError(ctx, client, namespace, missing)
}

// kubeCheckByListing lists one Service and one EndpointSlice in namespace
// and names the list permissions that are refused.
func kubeCheckByListing(ctx context.Context, client kubernetes.Interface, host, namespace string) error {
	one := metav1.ListOptions{Limit: 1}
	var (
		missing []string
		refusal error
	)
	for _, try := range []struct {
		access kubeAccess
		list   func() error
	}{
		{kubeNeeded[0], func() error { _, err := client.CoreV1().Services(namespace).List(ctx, one); return err }},
		{kubeNeeded[2], func() error { _, err := client.DiscoveryV1().EndpointSlices(namespace).List(ctx, one); return err }},
	} {
		err := try.list()
		switch {
		case apierrors.IsForbidden(err):
			missing = append(missing, try.access.String())
			refusal = cmp.Or(refusal, err)
		case err != nil:
			return kubeCheckError(host, err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	// Without self-reviews the user's name is only in the refusal.
	return fmt.Errorf("%w (%w)", kubeMissingError(ctx, client, namespace, missing), refusal)
}

// kubeMissingError names who lacks which permissions where.
func kubeMissingError(ctx context.Context, client kubernetes.Interface, namespace string, missing []string) error {
	where := "across all namespaces (--namespace is empty)"
	if namespace != "" {
		where = fmt.Sprintf("in namespace %q", namespace)
	}
	return fmt.Errorf("%s may not %s %s; bind it to the ClusterRole in deploy/base/rbac.yaml",
		kubeWhoAmI(ctx, client), strings.Join(missing, ", "), where)
}

func kubeAllowed(ctx context.Context, client kubernetes.Interface, namespace string, a kubeAccess) (bool, error) {
	r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: a.verb, Group: a.group, Resource: a.resource,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

// kubeCheckError tells an API server that answered with a refusal from one
// that could not be reached: the first is about credentials, the second
// about the network or the address.
func kubeCheckError(host string, err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Errorf("reach the Kubernetes API server at %s: %w", host, err)
	}
	return fmt.Errorf("check permissions with the Kubernetes API server at %s: %w", host, err)
}

// kubeWhoAmI names the identity the API server sees, so that the operator
// knows whom to grant; it falls back to a generic phrase, as the name only
// helps the message.
func kubeWhoAmI(ctx context.Context, client kubernetes.Interface) string {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "these Kubernetes credentials"
	}
	return fmt.Sprintf("Kubernetes user %q", r.Status.UserInfo.Username)
}
