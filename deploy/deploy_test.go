package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/kubetest"
)

// overlays are every overlay under deploy/overlays.
var overlays = []string{"example", "mtls", "release"}

// TestKubeDeployOverlay renders every overlay with kubectl's kustomize and
// has a real kube-apiserver validate every object it knows the kind of
// (apply --dry-run=server); cert-manager's objects, whose CRDs the test API
// server lacks, are checked by their rendered fields. Then it checks the
// properties the manifests promise.
func TestKubeDeployOverlay(t *testing.T) {
	env := kubetest.Start(t)
	kubectl := filepath.Join(env.Bin, "kubectl")
	kubeconfig := env.Kubeconfig(t)

	// Server-side dry run checks namespaced objects against an existing
	// namespace, so create that one for real first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ringxds-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	server := buildServer(t)
	rendered := map[string][]map[string]any{}
	for _, o := range overlays {
		objs := decode(t, run(t, kubectl, nil, "kustomize", filepath.Join("overlays", o)))
		rendered[o] = objs
		var known []map[string]any
		var want []string
		for _, obj := range objs {
			if group(obj) == "cert-manager.io" {
				continue
			}
			known = append(known, obj)
			want = append(want, objectRef(obj))
		}
		out := run(t, kubectl, encode(t, known), "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
		for _, w := range want {
			if !strings.Contains(string(out), w+" ") {
				t.Errorf("%s: dry-run output lacks %s:\n%s", o, w, out)
			}
		}
		// The arguments are flags the binary accepts: a typo here would
		// crash-loop every replica.
		args := toStrings(container(t, objs)["args"])
		if out, err := exec.Command(server, append(args, "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: xds-server refuses the manifest's arguments %q: %v\n%s", o, args, err, out)
		}
		// No floating image: a tag that is not latest, or a digest.
		for _, img := range images(objs) {
			if !pinned.MatchString(img) || strings.HasSuffix(img, ":latest") {
				t.Errorf("%s: image %q is not pinned to a version tag or digest", o, img)
			}
		}
	}
	for _, want := range []string{"Namespace", "Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
		"PodDisruptionBudget", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "NetworkPolicy"} {
		find(t, rendered["example"], want)
	}

	t.Run("example", func(t *testing.T) { checkExample(t, rendered["example"]) })
	t.Run("debug and metrics", func(t *testing.T) {
		for _, o := range overlays {
			checkDebugSplit(t, o, rendered[o])
		}
	})
	t.Run("network policy", func(t *testing.T) {
		for _, o := range overlays {
			checkNetworkPolicy(t, o, rendered[o])
		}
	})
	t.Run("mtls", func(t *testing.T) {
		for _, o := range []string{"mtls", "release"} {
			checkMTLS(t, o, rendered[o])
		}
		if args := strings.Join(toStrings(container(t, rendered["example"])["args"]), " "); strings.Contains(args, "--tls-") {
			t.Errorf("example overlay has TLS flags without their Secret: %s", args)
		}
	})
	t.Run("release image by digest", func(t *testing.T) {
		img := toString(container(t, rendered["release"])["image"])
		if !regexp.MustCompile(`^[a-z0-9.-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$`).MatchString(img) {
			t.Errorf("release image %q is not pinned by digest alone", img)
		}
	})
}

// pinned matches an image with a tag or a digest.
var pinned = regexp.MustCompile(`^[^@:]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$`)

func checkExample(t *testing.T, objs []map[string]any) {
	dep := find(t, objs, "Deployment")
	if got := dig(dep, "metadata", "namespace"); got != "ringxds-system" {
		t.Errorf("deployment namespace = %v", got)
	}
	if got := dig(dep, "spec", "replicas"); got != 2 {
		t.Errorf("replicas = %v, want 2", got)
	}
	ctr := container(t, objs)
	if got := ctr["image"]; got != "registry.example.com/ringxds/xds-server:v0.1.0" {
		t.Errorf("image = %v", got)
	}
	args := strings.Join(toStrings(ctr["args"]), " ")
	for _, want := range []string{"--source=kubernetes", "--xds-addr=:18000"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if dig(ctr, "securityContext", "readOnlyRootFilesystem") != true || dig(ctr, "securityContext", "allowPrivilegeEscalation") != false ||
		!slices.Equal(toStrings(dig(ctr, "securityContext", "capabilities", "drop")), []string{"ALL"}) ||
		dig(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Errorf("container is not locked down: %v", ctr["securityContext"])
	}
	if dig(ctr, "resources", "requests", "cpu") == nil || dig(ctr, "resources", "requests", "memory") == nil {
		t.Errorf("no resource requests: %v", ctr["resources"])
	}

	// The Service exposes xDS only; the metrics port stays on the Pods.
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

// checkDebugSplit: probes and /metrics on a pod-network port, /debug/* and
// pprof on loopback only, and no container port for them.
func checkDebugSplit(t *testing.T, overlay string, objs []map[string]any) {
	ctr := container(t, objs)
	args := toStrings(ctr["args"])
	flag := func(name string) (string, bool) {
		v, ok := "", false
		for _, a := range args {
			if rest, found := strings.CutPrefix(a, name+"="); found {
				v, ok = rest, true
			}
		}
		return v, ok
	}
	metricsAddr, ok := flag("--metrics-addr")
	if !ok || metricsAddr != ":18080" {
		t.Errorf("%s: --metrics-addr = %q, want :18080 (the probes and /metrics on the pod network)", overlay, metricsAddr)
	}
	debugAddr, _ := flag("--debug-addr")
	if host, _, err := net.SplitHostPort(debugAddr); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("%s: --debug-addr = %q, want a loopback address", overlay, debugAddr)
	}
	if slices.ContainsFunc(args, func(a string) bool { return a == "--debug-remote" || strings.HasPrefix(a, "--debug-remote=") }) {
		t.Errorf("%s: --debug-remote opens /debug/* and pprof to the pod network", overlay)
	}
	_, debugPort, _ := net.SplitHostPort(debugAddr)
	metricsPort := ""
	for _, p := range ctr["ports"].([]any) {
		port := fmt.Sprint(dig(p, "containerPort"))
		if port == debugPort {
			t.Errorf("%s: the loopback debug port %s is declared as a container port", overlay, port)
		}
		if dig(p, "name") == "metrics" {
			metricsPort = port
		}
	}
	if metricsPort != "18080" {
		t.Errorf("%s: no container port named metrics on 18080 (ports %v)", overlay, ctr["ports"])
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if p := dig(ctr, probe, "httpGet", "port"); p != "metrics" {
			t.Errorf("%s: %s on port %v, want metrics", overlay, probe, p)
		}
	}
	if dig(ctr, "readinessProbe", "httpGet", "path") != "/readyz" || dig(ctr, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("%s: probes = %v / %v", overlay, ctr["readinessProbe"], ctr["livenessProbe"])
	}
	dep := find(t, objs, "Deployment")
	if got := fmt.Sprint(dig(dep, "spec", "template", "metadata", "annotations", "prometheus.io/port")); got != metricsPort {
		t.Errorf("%s: prometheus.io/port = %v, want the metrics port %s", overlay, got, metricsPort)
	}
}

// checkNetworkPolicy: the Pods admit xDS clients on xds and the scraper on
// metrics, and nothing else.
func checkNetworkPolicy(t *testing.T, overlay string, objs []map[string]any) {
	np := find(t, objs, "NetworkPolicy")
	dep := find(t, objs, "Deployment")
	podLabels, _ := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	selector, _ := dig(np, "spec", "podSelector", "matchLabels").(map[string]any)
	if len(selector) == 0 {
		t.Errorf("%s: the NetworkPolicy selects no Pods by label", overlay)
	}
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("%s: the NetworkPolicy selects %s=%v, which the ringxds Pods lack", overlay, k, v)
		}
	}
	if !slices.Equal(toStrings(dig(np, "spec", "policyTypes")), []string{"Ingress"}) {
		t.Errorf("%s: policyTypes = %v, want Ingress only (egress reaches the API server)", overlay, dig(np, "spec", "policyTypes"))
	}
	admitted := map[string]string{} // port -> the pod label admitted
	for _, r := range dig(np, "spec", "ingress").([]any) {
		from, _ := dig(r, "from").([]any)
		ports, _ := dig(r, "ports").([]any)
		if len(from) == 0 || len(ports) == 0 {
			t.Errorf("%s: ingress rule %v admits every source or every port", overlay, r)
			continue
		}
		for _, f := range from {
			labels, _ := dig(f, "podSelector", "matchLabels").(map[string]any)
			if len(labels) == 0 || dig(f, "ipBlock") != nil {
				t.Errorf("%s: ingress peer %v is not narrowed to labelled Pods", overlay, f)
			}
			for _, p := range ports {
				for k, v := range labels {
					admitted[fmt.Sprint(dig(p, "port"))] = fmt.Sprintf("%s=%v", k, v)
				}
			}
		}
	}
	want := map[string]string{"xds": "ringxds.io/xds-client=true", "metrics": "app.kubernetes.io/name=prometheus"}
	if !maps.Equal(admitted, want) {
		t.Errorf("%s: the NetworkPolicy admits %v, want %v", overlay, admitted, want)
	}
	// Its named ports are the container's.
	var names []string
	for _, p := range container(t, objs)["ports"].([]any) {
		names = append(names, toString(dig(p, "name")))
	}
	for port := range admitted {
		if !slices.Contains(names, port) {
			t.Errorf("%s: the NetworkPolicy names port %s, which the container does not declare (%v)", overlay, port, names)
		}
	}
}

// checkMTLS: the server reads its pair and client CA from the Secret that
// cert-manager's Certificate writes, for the Service's names in the
// overlay's namespace.
func checkMTLS(t *testing.T, overlay string, objs []map[string]any) {
	ctr := container(t, objs)
	args := toStrings(ctr["args"])
	var mount string
	mounts, _ := ctr["volumeMounts"].([]any)
	for _, m := range mounts {
		if dig(m, "name") == "xds-tls" {
			mount = toString(dig(m, "mountPath"))
			if dig(m, "readOnly") != true {
				t.Errorf("%s: the TLS volume is mounted writable", overlay)
			}
		}
	}
	if mount == "" {
		t.Fatalf("%s: no xds-tls volume mount in %v", overlay, ctr["volumeMounts"])
	}
	for _, want := range []string{"--tls-cert=" + mount + "/tls.crt", "--tls-key=" + mount + "/tls.key", "--tls-client-ca=" + mount + "/ca.crt"} {
		if !slices.Contains(args, want) {
			t.Errorf("%s: args %q lack %s", overlay, args, want)
		}
	}
	dep := find(t, objs, "Deployment")
	var secret string
	volumes, _ := dig(dep, "spec", "template", "spec", "volumes").([]any)
	for _, v := range volumes {
		if dig(v, "name") == "xds-tls" {
			secret = toString(dig(v, "secret", "secretName"))
			if mode := dig(v, "secret", "defaultMode"); mode != 0o440 {
				t.Errorf("%s: Secret files mode %v, want 0440", overlay, mode)
			}
		}
	}
	if fsGroup := dig(dep, "spec", "template", "spec", "securityContext", "fsGroup"); fsGroup == nil || fsGroup != dig(dep, "spec", "template", "spec", "securityContext", "runAsGroup") {
		t.Errorf("%s: fsGroup %v is not the container's group: it cannot read the 0440 key", overlay, fsGroup)
	}
	if svcPort := dig(find(t, objs, "Service"), "spec", "ports").([]any)[0]; dig(svcPort, "appProtocol") == "kubernetes.io/h2c" {
		t.Errorf("%s: the Service still announces plaintext h2c", overlay)
	}

	// cert-manager's objects: the server certificate lands in that Secret,
	// names the Service, and chains to a CA issuer rendered here.
	byName := map[string]map[string]any{}
	for _, o := range objs {
		if group(o) == "cert-manager.io" {
			if dig(o, "apiVersion") != "cert-manager.io/v1" {
				t.Errorf("%s: %v uses %v", overlay, objectRef(o), dig(o, "apiVersion"))
			}
			if ns := dig(o, "metadata", "namespace"); ns != "ringxds-system" {
				t.Errorf("%s: %s in namespace %v", overlay, objectRef(o), ns)
			}
			byName[toString(o["kind"])+"/"+toString(dig(o, "metadata", "name"))] = o
		}
	}
	var server map[string]any
	for _, o := range byName {
		if o["kind"] == "Certificate" && secret != "" && dig(o, "spec", "secretName") == secret {
			server = o
		}
	}
	if server == nil {
		t.Fatalf("%s: no cert-manager Certificate writes the Secret %q the Deployment mounts (rendered: %v)", overlay, secret, slices.Sorted(maps.Keys(byName)))
	}
	dns := toStrings(dig(server, "spec", "dnsNames"))
	for _, want := range []string{"ringxds.ringxds-system.svc", "ringxds.ringxds-system.svc.cluster.local"} {
		if !slices.Contains(dns, want) {
			t.Errorf("%s: server certificate names %v, not %s", overlay, dns, want)
		}
	}
	if !slices.Contains(toStrings(dig(server, "spec", "usages")), "server auth") {
		t.Errorf("%s: server certificate usages %v lack server auth", overlay, dig(server, "spec", "usages"))
	}
	// Walk the issuers up to the self-signed root; each CA issuer's Secret
	// is written by a CA Certificate.
	issuer := server
	for range 4 {
		ref := toString(dig(issuer, "spec", "issuerRef", "kind")) + "/" + toString(dig(issuer, "spec", "issuerRef", "name"))
		iss, ok := byName[ref]
		if !ok {
			t.Fatalf("%s: %s is issued by %s, which is not rendered", overlay, objectRef(issuer), ref)
		}
		if dig(iss, "spec", "selfSigned") != nil {
			return
		}
		caSecret := dig(iss, "spec", "ca", "secretName")
		issuer = nil
		for _, o := range byName {
			if o["kind"] == "Certificate" && caSecret != nil && dig(o, "spec", "secretName") == caSecret && dig(o, "spec", "isCA") == true {
				issuer = o
			}
		}
		if issuer == nil {
			t.Fatalf("%s: issuer %s signs with Secret %v, which no CA Certificate writes", overlay, ref, caSecret)
		}
	}
	t.Errorf("%s: the issuer chain does not end at a self-signed issuer", overlay)
}

// buildServer builds xds-server, whose flag parser judges the manifests'
// arguments.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "xds-server")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/xds-server").CombinedOutput(); err != nil {
		t.Fatalf("go build xds-server: %v\n%s", err, out)
	}
	return bin
}

func container(t *testing.T, objs []map[string]any) map[string]any {
	t.Helper()
	ctrs, _ := dig(find(t, objs, "Deployment"), "spec", "template", "spec", "containers").([]any)
	for _, c := range ctrs {
		if dig(c, "name") == "xds-server" {
			return c.(map[string]any)
		}
	}
	t.Fatal("no xds-server container rendered")
	return nil
}

func images(objs []map[string]any) []string {
	var out []string
	for _, o := range objs {
		for _, key := range []string{"containers", "initContainers"} {
			cs, _ := dig(o, "spec", "template", "spec", key).([]any)
			for _, c := range cs {
				out = append(out, toString(dig(c, "image")))
			}
		}
	}
	return out
}

func group(obj map[string]any) string {
	g, _, found := strings.Cut(toString(obj["apiVersion"]), "/")
	if !found {
		return ""
	}
	return g
}

// objectRef is how kubectl names an object in its output.
func objectRef(obj map[string]any) string {
	ref := strings.ToLower(toString(obj["kind"]))
	if g := group(obj); g != "" {
		ref += "." + g
	}
	return ref + "/" + toString(dig(obj, "metadata", "name"))
}

func encode(t *testing.T, objs []map[string]any) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

func toString(v any) string {
	s, _ := v.(string)
	return s
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
