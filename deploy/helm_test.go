package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/watch"
)

// chartDir is the Helm chart, from this package's folder.
const chartDir = "helm/ringxds"

// chartNamespace is the namespace every chart render and kustomize render is
// compared and dry-run in.
const chartNamespace = "ringxds-system"

// helmLabels are the labels the chart adds to every object's metadata on
// top of deploy/base's; they never reach a selector or the Pods.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// chartCase is one set of chart values and what its render must satisfy.
type chartCase struct {
	name   string
	values string // YAML, as with helm install -f
	// kustomize, when set, is a folder under deploy whose render the
	// chart's must equal object by object.
	kustomize string
	check     func(t *testing.T, objs []map[string]any)
}

// chartCases are the value sets TestKubeHelmChart renders and dry-runs.
var chartCases = []chartCase{
	{name: "defaults", kustomize: "base", check: func(t *testing.T, objs []map[string]any) {
		checkDebugSplit(t, "chart defaults", objs)
		checkNetworkPolicy(t, "chart defaults", objs)
	}},
	{
		name: "mtls with cert-manager",
		values: `
image: {repository: registry.example.com/ringxds/xds-server}
tls: {enabled: true, certManager: {enabled: true}}`,
		kustomize: "overlays/mtls",
		check:     func(t *testing.T, objs []map[string]any) { checkMTLS(t, "chart mtls", objs) },
	},
	{
		name: "release digest",
		values: `
image: {repository: registry.example.com/ringxds/xds-server, digest: RELEASE_DIGEST}
tls: {enabled: true, certManager: {enabled: true}}`,
		kustomize: "overlays/release",
	},
	{name: "file source inline", values: `
source: {type: file, file: {endpoints: ENDPOINTS}}`, check: checkChartFileInline},
	{name: "file source from a ConfigMap", values: `
source: {type: file, file: {existingConfigMap: shop-endpoints, key: shop.yaml}}`, check: checkChartFileExisting},
	{name: "debug remote", values: `
debug: {remote: true, allowedHosts: [ringxds-debug.example.com]}
networkPolicy:
  debugClients: [{podSelector: {matchLabels: {team: sre}}}]`, check: checkChartDebugRemote},
	{name: "narrowed", values: `
replicas: 3
source: {kubernetes: {namespace: shop, serviceSelector: ringxds.io/serve=true, maxRingSize: 8388608}}
tls: {enabled: true, clientCA: false, secretName: shop-xds}
resources: {requests: {cpu: 50m, memory: 64Mi}, limits: null}
goMemLimit: 200MiB
podDisruptionBudget: {maxUnavailable: 1}
networkPolicy: {enabled: false}
admissionPolicy: {enabled: false}
extraArgs: [--max-connection-age=1h]`, check: checkChartNarrowed},
}

// TestKubeHelmChart renders the Helm chart with the Helm SDK for several
// value sets and has a real kube-apiserver validate every object it knows
// the kind of (apply --dry-run=server; cert-manager's objects are checked
// as rendered, as TestKubeDeployOverlay does). With the default values, and
// with the values matching the mtls and release overlays, the render must
// equal the kustomize render object by object, so the two cannot drift.
func TestKubeHelmChart(t *testing.T) {
	env := kubetest.Start(t)
	kubectl := filepath.Join(env.Bin, "kubectl")
	kubeconfig := env.Kubeconfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	server := buildServer(t)
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			values := strings.ReplaceAll(c.values, "ENDPOINTS", exampleEndpointsJSON(t))
			values = strings.ReplaceAll(values, "RELEASE_DIGEST", releaseDigest(t))
			objs, err := renderChart(values)
			if err != nil {
				t.Fatalf("helm render: %v", err)
			}
			var known []map[string]any
			for _, obj := range objs {
				if group(obj) != "cert-manager.io" {
					known = append(known, obj)
				}
			}
			out := run(t, kubectl, encode(t, known), "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
			for _, obj := range known {
				if !strings.Contains(string(out), objectRef(obj)+" ") {
					t.Errorf("dry-run output lacks %s:\n%s", objectRef(obj), out)
				}
			}
			args := toStrings(container(t, objs)["args"])
			if out, err := exec.Command(server, append(args, "--help")...).CombinedOutput(); err != nil {
				t.Errorf("xds-server refuses the chart's arguments %q: %v\n%s", args, err, out)
			}
			if c.kustomize != "" {
				want := renderKustomize(t, kubectl, c.kustomize)
				if diff := diffObjects(objs, want); len(diff) > 0 {
					t.Errorf("the chart and deploy/%s differ (%s):\n%s", c.kustomize, c.values, strings.Join(diff, "\n"))
				}
			}
			if c.check != nil {
				c.check(t, objs)
			}
		})
	}
}

// exampleEndpointsJSON is examples/endpoints.yaml as a JSON value, which
// YAML values take inline.
func exampleEndpointsJSON(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../examples/endpoints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(j)
}

// releaseDigest is the digest deploy/overlays/release pins (make
// release-pin sets it).
func releaseDigest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("overlays/release/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct{ Digest string } `yaml:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil || len(k.Images) != 1 {
		t.Fatalf("overlays/release: images %v (%v), want one", k.Images, err)
	}
	return k.Images[0].Digest
}

// TestHelmChartRefuses checks that values which would render objects that
// cannot work are refused at render time, by the schema or the templates,
// with a message naming the value.
func TestHelmChartRefuses(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{`source: {type: files}`, "/source/type"},
		{`source: {type: file}`, "source.file.existingConfigMap or source.file.endpoints"},
		{`source: {type: file, file: {existingConfigMap: a, endpoints: {clusters: []}}}`, "exclude each other"},
		{`source: {kubernetes: {maxRingSize: 0}}`, "/source/kubernetes/maxRingSize"},
		{`image: {digest: "sha256:abc"}`, "/image/digest"},
		{`tls: {certManager: {enabled: true}}`, "tls.certManager.enabled needs tls.enabled"},
		{`debug: {port: 18080}`, "must differ"},
		{`replica: 3`, "'replica'"},
	} {
		_, err := renderChart(c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %s: err = %v, want one naming %q", c.values, err, c.want)
		}
	}
}

// renderChart renders the chart as helm install ringxds -n ringxds-system
// -f values would, and decodes the objects.
func renderChart(values string) ([]map[string]any, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	// Helm's own reader, as helm install -f uses: numbers become float64,
	// which the schema and the templates must cope with.
	vals, err := common.ReadValues([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	opts := common.ReleaseOptions{Name: "ringxds", Namespace: chartNamespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, opts, common.DefaultCapabilities, false)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(files[name]))
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if m != nil {
				objs = append(objs, m)
			}
		}
	}
	return objs, nil
}

// renderKustomize renders deploy/<dir> in chartNamespace, as the chart is.
// deploy/base sets no namespace, so it is wrapped in a kustomization that
// does (kustomize refuses absolute paths, hence the relative one).
func renderKustomize(t *testing.T, kubectl, dir string) []map[string]any {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dir == "base" {
		wrap := t.TempDir()
		rel, err := filepath.Rel(wrap, abs)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("namespace: %s\nresources:\n  - %s\n", chartNamespace, filepath.ToSlash(rel))
		if err := os.WriteFile(filepath.Join(wrap, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		abs = wrap
	}
	return decode(t, run(t, kubectl, nil, "kustomize", abs))
}

// clusterScoped are the kinds the chart and the overlays render that have
// no namespace; kustomize's namespace transformer still gives some of them
// one, which the API server ignores.
var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// diffObjects compares the chart's objects with kustomize's, less Helm's
// labels and the overlays' Namespace (helm install -n creates none), and
// names every difference by object and field path.
func diffObjects(chart, kustomize []map[string]any) []string {
	key := func(o map[string]any) string {
		return fmt.Sprintf("%s %s/%s", toString(o["kind"]), toString(dig(o, "metadata", "namespace")), toString(dig(o, "metadata", "name")))
	}
	got, want := map[string]any{}, map[string]any{}
	for _, o := range chart {
		o = deepCopy(o).(map[string]any)
		if labels, ok := dig(o, "metadata", "labels").(map[string]any); ok {
			for _, l := range helmLabels {
				delete(labels, l)
			}
		}
		got[key(o)] = o
	}
	for _, o := range kustomize {
		if o["kind"] == "Namespace" {
			continue
		}
		o = deepCopy(o).(map[string]any)
		if slices.Contains(clusterScoped, toString(o["kind"])) {
			delete(o["metadata"].(map[string]any), "namespace")
		}
		want[key(o)] = o
	}
	return diffValues("", got, want)
}

// diffValues lists the paths where got (the chart) and want (kustomize)
// differ.
func diffValues(path string, got, want any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if _, ok := g[k]; !ok {
				out = append(out, fmt.Sprintf("%s: only kustomize has it: %s", path+"."+k, brief(w[k])))
				continue
			}
			out = append(out, diffValues(path+"."+k, g[k], w[k])...)
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s: only the chart has it: %s", path+"."+k, brief(g[k])))
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		var out []string
		for i := range w {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), g[i], w[i])...)
		}
		return out
	}
	if reflect.DeepEqual(got, want) {
		return nil
	}
	if strings.HasSuffix(path, ".expression") || strings.HasSuffix(path, ".messageExpression") {
		// kubectl's kustomize and yaml.v3 read the line breaks of a folded
		// scalar's more-indented lines differently ("\n\n  " against
		// "\n  "). CEL ignores white space between tokens, and its string
		// literals hold no line breaks, so a line break and the space
		// around it compare as one space.
		g, _ := got.(string)
		w, _ := want.(string)
		if celLineBreak.ReplaceAllString(g, " ") == celLineBreak.ReplaceAllString(w, " ") {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: chart %s, kustomize %s", path, brief(got), brief(want))}
}

// celLineBreak is a line break in a CEL expression with the white space
// around it.
var celLineBreak = regexp.MustCompile(`\s*\n\s*`)

// brief prints a value on one line, cut short.
func brief(v any) string {
	b, _ := yaml.Marshal(v)
	s := strings.Join(strings.Fields(string(bytes.TrimSpace(b))), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// checkChartFileInline: the endpoints in the values become a ConfigMap the
// file source parses, mounted as a directory (so that updates reach the
// Pods), with no API access at all.
func checkChartFileInline(t *testing.T, objs []map[string]any) {
	checkChartFileSource(t, objs, "ringxds-endpoints", "endpoints.yaml")
	var cm map[string]any
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap rendered for source.file.endpoints")
	}
	data := toString(dig(cm, "data", "endpoints.yaml"))
	state, err := watch.ParseFile("endpoints.yaml", []byte(data))
	if err != nil {
		t.Fatalf("the rendered endpoints file does not parse: %v\n%s", err, data)
	}
	orig, err := os.ReadFile("../examples/endpoints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := watch.ParseFile("endpoints.yaml", orig)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(state, want) {
		t.Errorf("the rendered endpoints file serves other clusters than the values gave")
	}
}

func checkChartFileExisting(t *testing.T, objs []map[string]any) {
	checkChartFileSource(t, objs, "shop-endpoints", "shop.yaml")
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			t.Errorf("a ConfigMap is rendered although source.file.existingConfigMap names one")
		}
	}
}

func checkChartFileSource(t *testing.T, objs []map[string]any, configMap, key string) {
	t.Helper()
	ctr := container(t, objs)
	args := toStrings(ctr["args"])
	var mount string
	for _, m := range ctr["volumeMounts"].([]any) {
		if dig(m, "name") == "endpoints" {
			mount = toString(dig(m, "mountPath"))
			if dig(m, "subPath") != nil {
				t.Errorf("the ConfigMap is mounted with subPath, which the kubelet never updates")
			}
		}
	}
	if want := "--file=" + mount + "/" + key; mount == "" || !slices.Contains(args, want) {
		t.Errorf("args %q lack %s", args, want)
	}
	dep := find(t, objs, "Deployment")
	var vol any
	for _, v := range dig(dep, "spec", "template", "spec", "volumes").([]any) {
		if dig(v, "name") == "endpoints" {
			vol = v
		}
	}
	if dig(vol, "configMap", "name") != configMap {
		t.Errorf("endpoints volume = %v, want ConfigMap %s", vol, configMap)
	}
	if dig(dep, "spec", "template", "spec", "automountServiceAccountToken") != false {
		t.Errorf("the file source gets a service account token it never uses")
	}
	for _, o := range objs {
		if k := toString(o["kind"]); slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy"}, k) {
			t.Errorf("the file source renders a %s", k)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kube-") }) {
		t.Errorf("the file source gets Kubernetes flags: %q", args)
	}
}

// checkChartDebugRemote: the debug listener on the pod network is declared
// as a port and admitted from the named peers only.
func checkChartDebugRemote(t *testing.T, objs []map[string]any) {
	ctr := container(t, objs)
	args := toStrings(ctr["args"])
	for _, want := range []string{"--debug-addr=:18081", "--debug-remote", "--debug-allowed-hosts=ringxds-debug.example.com", "--metrics-addr=:18080"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	var declared bool
	for _, p := range ctr["ports"].([]any) {
		declared = declared || dig(p, "name") == "debug" && dig(p, "containerPort") == 18081
	}
	if !declared {
		t.Errorf("no container port debug on 18081: %v", ctr["ports"])
	}
	admitted := map[string][]string{}
	for _, r := range dig(find(t, objs, "NetworkPolicy"), "spec", "ingress").([]any) {
		for _, p := range dig(r, "ports").([]any) {
			admitted[toString(dig(p, "port"))] = append(admitted[toString(dig(p, "port"))], brief(dig(r, "from")))
		}
	}
	if got := admitted["debug"]; len(got) != 1 || got[0] != "- podSelector: matchLabels: team: sre" {
		t.Errorf("the debug port admits %v, want the debugClients peers only", got)
	}
	if len(admitted) != 3 {
		t.Errorf("the NetworkPolicy admits ports %v, want xds, metrics and debug", slices.Sorted(maps.Keys(admitted)))
	}
}

// checkChartNarrowed: the values that have no kustomize counterpart reach
// the objects.
func checkChartNarrowed(t *testing.T, objs []map[string]any) {
	dep := find(t, objs, "Deployment")
	if got := dig(dep, "spec", "replicas"); got != 3 {
		t.Errorf("replicas = %v, want 3", got)
	}
	ctr := container(t, objs)
	args := toStrings(ctr["args"])
	for _, want := range []string{"--namespace=shop", "--service-selector=ringxds.io/serve=true", "--kube-max-ring-size=8388608",
		"--tls-cert=/etc/ringxds/xds-tls/tls.crt", "--max-connection-age=1h"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--tls-client-ca") }) {
		t.Errorf("tls.clientCA: false still asks for client certificates: %q", args)
	}
	env, _ := ctr["env"].([]any)
	if len(env) != 1 || dig(env[0], "name") != "GOMEMLIMIT" || dig(env[0], "value") != "200MiB" {
		t.Errorf("env = %v, want GOMEMLIMIT=200MiB", env)
	}
	if dig(ctr, "resources", "limits") != nil || dig(ctr, "resources", "requests", "cpu") != "50m" {
		t.Errorf("resources = %v", ctr["resources"])
	}
	for _, v := range dig(dep, "spec", "template", "spec", "volumes").([]any) {
		if dig(v, "name") == "xds-tls" && dig(v, "secret", "secretName") != "shop-xds" {
			t.Errorf("TLS volume = %v, want Secret shop-xds", v)
		}
	}
	pdb := find(t, objs, "PodDisruptionBudget")
	if dig(pdb, "spec", "maxUnavailable") != 1 || dig(pdb, "spec", "minAvailable") != nil {
		t.Errorf("PDB spec = %v, want maxUnavailable 1 alone", pdb["spec"])
	}
	for _, o := range objs {
		if k := toString(o["kind"]); k == "NetworkPolicy" || strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
			t.Errorf("a %s is rendered although disabled", k)
		}
	}
}
