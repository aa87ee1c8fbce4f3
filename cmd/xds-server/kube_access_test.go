package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ringxds/ringxds/internal/kubetest"
)

// Credentials without the grants of deploy/base/rbac.yaml fail start-up
// with a message naming each missing permission and the ClusterRole, and
// the ClusterRole as shipped is enough. The API server authorizes with
// RBAC; identities are ServiceAccounts the admin impersonates.
func TestKubeStartupChecksPermissions(t *testing.T) {
	env := kubetest.Start(t, kubetest.WithRBAC())
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kubectl(t, env, "apply", "-f", filepath.Join("..", "..", "deploy", "base", "rbac.yaml"))
	grantServicesOnly(ctx, t, env, ns, "half")

	all := []string{"list services", "watch services", "list endpointslices.discovery.k8s.io", "watch endpointslices.discovery.k8s.io"}
	tests := []struct {
		name, user, namespace string
		missing               []string // nil: start-up succeeds
	}{
		{"no grants, one namespace", "system:serviceaccount:" + ns + ":nobody", ns, all},
		{"no grants, all namespaces", "system:serviceaccount:" + ns + ":nobody", "", all},
		{"services only", "system:serviceaccount:" + ns + ":half", ns, all[2:]},
		{"the deploy ClusterRole, one namespace", "system:serviceaccount:default:ringxds", ns, nil},
		{"the deploy ClusterRole, all namespaces", "system:serviceaccount:default:ringxds", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config{kubeconfig: impersonating(t, env, tt.user), namespace: tt.namespace}
			_, err := newKubeSource(ctx, cfg, zap.NewNop(), prometheus.NewRegistry())
			if tt.missing == nil {
				if err != nil {
					t.Fatalf("start-up failed with the deploy ClusterRole bound: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("start-up succeeded without %v", tt.missing)
			}
			t.Log(err)
			for _, want := range append([]string{tt.user, "deploy/base/rbac.yaml"}, tt.missing...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not name %q: %v", want, err)
				}
			}
			for _, p := range all {
				if !slices.Contains(tt.missing, p) && strings.Contains(err.Error(), p) {
					t.Errorf("error names %q, which is granted: %v", p, err)
				}
			}
		})
	}
}

// An API server that cannot be reached is reported as such, not as a
// permission problem.
func TestKubeStartupUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := "https://" + l.Addr().String()
	l.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q, insecure-skip-tls-verify: true}\n"+
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n", host)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = newKubeSource(context.Background(), config{kubeconfig: path}, zap.NewNop(), prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "reach the Kubernetes API server at "+host) {
		t.Fatalf("err = %v, want it to say the API server at %s could not be reached", err, host)
	}
}

// grantServicesOnly lets ServiceAccount sa list and watch Services in ns,
// and nothing else.
func grantServicesOnly(ctx context.Context, t *testing.T, env *kubetest.Env, ns, sa string) {
	t.Helper()
	rbac := env.Client.RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "services"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "services"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "services"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// impersonating writes a kubeconfig that acts as user through the admin's
// right to impersonate.
func impersonating(t *testing.T, env *kubetest.Env, user string) string {
	t.Helper()
	path := env.Kubeconfig(t)
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = user
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubectl(t *testing.T, env *kubetest.Env, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.Bin, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig(t)}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// In a hardened cluster that does not let every user create
// SelfSubjectAccessReviews (the system:basic-user binding removed), start-up
// checks by listing instead: the deploy ClusterRole still starts, and
// credentials without it are still named with what they lack.
func TestKubeStartupWithoutSelfReviews(t *testing.T) {
	env := kubetest.Start(t, kubetest.WithRBAC())
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kubectl(t, env, "apply", "-f", filepath.Join("..", "..", "deploy", "base", "rbac.yaml"))
	if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "system:basic-user", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody := "system:serviceaccount:" + ns + ":nobody"
	// The authorizer's cache takes a moment to drop the binding.
	for i := 0; ; i++ {
		err := newKubeSourceErr(ctx, t, env, nobody, ns)
		if err != nil && strings.Contains(err.Error(), "list services") {
			break
		}
		if i == 100 {
			t.Fatalf("SelfSubjectAccessReviews are still allowed, or the fallback failed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := newKubeSourceErr(ctx, t, env, nobody, ns)
	for _, want := range []string{nobody, "list services", "list endpointslices.discovery.k8s.io", "deploy/base/rbac.yaml"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if err := newKubeSourceErr(ctx, t, env, "system:serviceaccount:default:ringxds", ""); err != nil {
		t.Fatalf("start-up failed with the deploy ClusterRole bound: %v", err)
	}
}

func newKubeSourceErr(ctx context.Context, t *testing.T, env *kubetest.Env, user, namespace string) error {
	_, err := newKubeSource(ctx, config{kubeconfig: impersonating(t, env, user), namespace: namespace}, zap.NewNop(), prometheus.NewRegistry())
	return err
}
