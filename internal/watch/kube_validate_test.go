package watch

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// KubeServiceProblems is the admission rule; deploy/admission_test.go checks
// it against the policy on a real API server. These cases run without one.
func TestKubeServiceProblems(t *testing.T) {
	two := []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "grpc", Port: 8080}}
	tests := []struct {
		name  string
		svc   *corev1.Service
		names []string // annotation each problem starts with
	}{
		{"not ours", kubeAnnotated(map[string]string{"example.com/x": "y"}), nil},
		{"opted in", kubeAnnotated(map[string]string{AnnotationEnabled: "true"}, two[0]), nil},
		{"switched off, ports not judged", kubeAnnotated(map[string]string{AnnotationEnabled: "false"}, two...), nil},
		{"opted in, port needed", kubeAnnotated(map[string]string{AnnotationEnabled: "true"}, two...), []string{AnnotationPort}},
		{"enabled empty", kubeAnnotated(map[string]string{AnnotationEnabled: ""}), []string{AnnotationEnabled}},
		{"values judged without enabled", kubeAnnotated(map[string]string{AnnotationLBPolicy: "maglev2"}), []string{AnnotationLBPolicy}},
		{"port not resolved while settings are bad", kubeAnnotated(map[string]string{AnnotationEnabled: "true", AnnotationHashKey: "uid"}, two...), []string{AnnotationHashKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := KubeServiceProblems(tt.svc)
			if len(got) != len(tt.names) {
				t.Fatalf("problems = %q, want one each for %v", got, tt.names)
			}
			for i, key := range tt.names {
				if !strings.HasPrefix(got[i], key+": ") {
					t.Errorf("problem %q does not start with %s", got[i], key)
				}
			}
		})
	}
}
