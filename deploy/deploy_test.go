package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/kubetest"
)

// TestKubeDeployOverlay renders the example overlay with kubectl's kustomize
// and has a real kube-apiserver validate every object (apply --dry-run=server),
// then checks the properties the manifests promise.
func TestKubeDeployOverlay(t *testing.T) {
	env := kubetest.Start(t)
	kubectl := filepath.Join(env.Bin, "kubectl")
	kubeconfig := env.Kubeconfig(t)

	rendered := run(t, kubectl, nil, "kustomize", filepath.Join("overlays", "example"))
	objs := decode(t, rendered)

	// Server-side dry run checks namespaced objects against an existing
	// namespace, so create that one for real first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ringxds-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	out := run(t, kubectl, rendered, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
	for _, want := range []string{
		"deployment.apps/ringxds", "service/ringxds", "serviceaccount/ringxds",
		"clusterrole.rbac.authorization.k8s.io/ringxds", "clusterrolebinding.rbac.authorization.k8s.io/ringxds",
		"poddisruptionbudget.policy/ringxds",
		"validatingadmissionpolicy.admissionregistration.k8s.io/ringxds-annotations",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/ringxds-annotations",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dry-run output lacks %s:\n%s", want, out)
		}
	}

	dep := find(t, objs, "Deployment")
	if got := dig(dep, "metadata", "namespace"); got != "ringxds-system" {
		t.Errorf("deployment namespace = %v", got)
	}
	if got := dig(dep, "spec", "replicas"); got != 2 {
		t.Errorf("replicas = %v, want 2", got)
	}
	ctr := dig(dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	if got := ctr["image"]; got != "registry.example.com/ringxds/xds-server:v0.1.0" {
		t.Errorf("image = %v", got)
	}
	args := strings.Join(toStrings(ctr["args"]), " ")
	for _, want := range []string{"--source=kubernetes", "--xds-addr=:18000", "--debug-addr=:18080"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if dig(ctr, "readinessProbe", "httpGet", "path") != "/readyz" || dig(ctr, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("probes = %v / %v", ctr["readinessProbe"], ctr["livenessProbe"])
	}
	if dig(ctr, "securityContext", "readOnlyRootFilesystem") != true || dig(ctr, "securityContext", "allowPrivilegeEscalation") != false ||
		!slices.Equal(toStrings(dig(ctr, "securityContext", "capabilities", "drop")), []string{"ALL"}) ||
		dig(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Errorf("container is not locked down: %v", ctr["securityContext"])
	}
	if dig(ctr, "resources", "requests", "cpu") == nil || dig(ctr, "resources", "requests", "memory") == nil {
		t.Errorf("no resource requests: %v", ctr["resources"])
	}

	// The Service exposes xDS only; the debug port stays internal.
	svc := find(t, objs, "Service")
	ports := dig(svc, "spec", "ports").([]any)
	if len(ports) != 1 || dig(ports[0], "port") != 18000 {
		t.Errorf("service ports = %v, want only 18000", ports)
	}

	// Read-only RBAC on exactly what the source watches.
	role := find(t, objs, "ClusterRole")
	for _, r := range dig(role, "rules").([]any) {
		if verbs := toStrings(dig(r, "verbs")); !slices.Equal(verbs, []string{"get", "list", "watch"}) {
			t.Errorf("rule %v grants %v, want get/list/watch only", r, verbs)
		}
	}
	if got := dig(find(t, objs, "ClusterRoleBinding"), "subjects").([]any)[0]; dig(got, "namespace") != "ringxds-system" {
		t.Errorf("binding subject = %v, want the overlay's namespace", got)
	}
	if dig(find(t, objs, "PodDisruptionBudget"), "spec", "minAvailable") != 1 {
		t.Errorf("PDB does not keep a replica")
	}
}

func run(t *testing.T, bin string, stdin []byte, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func decode(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("rendered manifests are not YAML: %v", err)
		}
		out = append(out, m)
	}
}

func find(t *testing.T, objs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

// dig walks nested maps; it returns nil when a key is missing.
func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
