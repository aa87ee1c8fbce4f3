package watch

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// KubeServiceProblems returns what is wrong with the ringxds.io/ annotations
// of svc, one message per problem, each starting with the annotation's key;
// nil when nothing is or when svc carries no ringxds.io/ annotation.
//
// It is the rule the admission policy in
// deploy/base/validating-admission-policy.yaml enforces, and the test of
// that policy compares the two. It is stricter than serving in two ways, so
// that a value cannot lie in wait: values are judged whether or not the
// Service is opted in, and ringxds.io/enabled must be "true" or "false"
// (serving reads an empty value as "false"). The port is resolved against
// the Service's ports only when the Service is opted in, because a Service
// that is switched off may change its ports freely.
func KubeServiceProblems(svc *corev1.Service) []string {
	if !kubeHasAnnotation(svc) {
		return nil
	}
	var out []string
	enabled, hasEnabled := svc.Annotations[AnnotationEnabled]
	if hasEnabled && enabled != "true" && enabled != "false" {
		out = append(out, fmt.Sprintf("%s: %q: want \"true\" or \"false\"", AnnotationEnabled, enabled))
	}
	settings, errs := kubeParseSettings(svc)
	for _, e := range errs {
		out = append(out, e.annotation+": "+e.msg)
	}
	if len(errs) == 0 && enabled == "true" {
		if _, err := kubeResolvePort(svc, settings.port); err != nil {
			out = append(out, AnnotationPort+": "+err.Error())
		}
	}
	return out
}

// kubeHasAnnotation reports whether svc carries any ringxds.io/ annotation,
// the admission policy's match condition.
func kubeHasAnnotation(svc *corev1.Service) bool {
	for k := range svc.Annotations {
		if strings.HasPrefix(k, "ringxds.io/") {
			return true
		}
	}
	return false
}
