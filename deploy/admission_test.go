package deploy

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/watch"
)

// policyName is the ValidatingAdmissionPolicy and its binding; a refusal
// names it, which tells it apart from the API server's own validation.
const policyName = "ringxds-annotations"

// admissionCase is one Service put to the API server and to the Go parser.
type admissionCase struct {
	name  string
	a     map[string]string
	ports []corev1.ServicePort // nil: one port, http/80
	// headless makes a Service with no ports possible.
	headless bool
	// bad is the annotation both must name in a refusal; "" means both
	// accept.
	bad string
	// gap marks a value the policy cannot judge: it accepts, the parser
	// refuses, naming bad.
	gap bool
}

var twoPorts = []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "grpc", Port: 8080}}

// on opts a Service in with the given extra annotations.
func on(kv ...string) map[string]string {
	a := map[string]string{watch.AnnotationEnabled: "true"}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	return a
}

var admissionCases = []admissionCase{
	{name: "opted in with defaults", a: on()},
	{name: "maglev with everything", a: on(watch.AnnotationLBPolicy, "maglev", watch.AnnotationHashHeader, "x-user", watch.AnnotationTableSize, "65537",
		watch.AnnotationFadeIn, "45s,1.5", watch.AnnotationFadeInCapacity, "100", watch.AnnotationHashKey, watch.KubeHashKeyHostname)},
	{name: "no ringxds annotation", a: map[string]string{"example.com/lb-policy": "maglev2"}},
	{name: "enabled yes", a: map[string]string{watch.AnnotationEnabled: "yes"}, bad: watch.AnnotationEnabled},
	{name: "enabled empty", a: map[string]string{watch.AnnotationEnabled: ""}, bad: watch.AnnotationEnabled},
	{name: "switched off with two ports and no port", a: map[string]string{watch.AnnotationEnabled: "false"}, ports: twoPorts},
	{name: "settings without enabled are judged", a: map[string]string{watch.AnnotationLBPolicy: "maglev2"}, bad: watch.AnnotationLBPolicy},
	{name: "lb-policy maglev2", a: on(watch.AnnotationLBPolicy, "maglev2"), bad: watch.AnnotationLBPolicy},
	{name: "lb-policy padded skipper", a: on(watch.AnnotationLBPolicy, " skipper ")},
	{name: "hash-header empty", a: on(watch.AnnotationHashHeader, " "), bad: watch.AnnotationHashHeader},
	{name: "hash-header upper case", a: on(watch.AnnotationHashHeader, "X-User"), bad: watch.AnnotationHashHeader},
	{name: "hash-header pseudo header", a: on(watch.AnnotationHashHeader, ":path"), bad: watch.AnnotationHashHeader},
	{name: "hash-header binary", a: on(watch.AnnotationHashHeader, "x-user-bin"), bad: watch.AnnotationHashHeader},
	{name: "hash-header odd but valid", a: on(watch.AnnotationHashHeader, "x_user.id-2")},
	{name: "ring-size", a: on(watch.AnnotationRingSize, "01024")},
	{name: "ring-size zero", a: on(watch.AnnotationRingSize, "0"), bad: watch.AnnotationRingSize},
	{name: "ring-size too large", a: on(watch.AnnotationRingSize, "8388609"), bad: watch.AnnotationRingSize},
	{name: "ring-size largest", a: on(watch.AnnotationRingSize, "8388608")},
	{name: "ring-size not a number", a: on(watch.AnnotationRingSize, "4k"), bad: watch.AnnotationRingSize},
	{name: "ring-size with min", a: on(watch.AnnotationRingSize, "1024", watch.AnnotationMinRingSize, "512"), bad: watch.AnnotationRingSize},
	{name: "min and max", a: on(watch.AnnotationMinRingSize, "512", watch.AnnotationMaxRingSize, "8192")},
	{name: "min above max", a: on(watch.AnnotationMinRingSize, "9000", watch.AnnotationMaxRingSize, "8000"), bad: watch.AnnotationMinRingSize},
	{name: "min alone above default max", a: on(watch.AnnotationMinRingSize, "5000")},
	{name: "max negative", a: on(watch.AnnotationMaxRingSize, "-1"), bad: watch.AnnotationMaxRingSize},
	{name: "table-size without maglev", a: on(watch.AnnotationTableSize, "65537"), bad: watch.AnnotationTableSize},
	{name: "table-size too large", a: on(watch.AnnotationLBPolicy, "maglev", watch.AnnotationTableSize, "5000012"), bad: watch.AnnotationTableSize},
	{name: "table-size largest", a: on(watch.AnnotationLBPolicy, "maglev", watch.AnnotationTableSize, "5000011")},
	{name: "table-size not prime", a: on(watch.AnnotationLBPolicy, "maglev", watch.AnnotationTableSize, "65536"), bad: watch.AnnotationTableSize, gap: true},
	{name: "fade-in off", a: on(watch.AnnotationFadeIn, "off")},
	{name: "fade-in on", a: on(watch.AnnotationFadeIn, "on")},
	{name: "fade-in compound duration", a: on(watch.AnnotationFadeIn, "1m30s")},
	{name: "fade-in fractional duration and exponent", a: on(watch.AnnotationFadeIn, "1.5m , 100")},
	{name: "fade-in without unit", a: on(watch.AnnotationFadeIn, "30"), bad: watch.AnnotationFadeIn},
	{name: "fade-in negative", a: on(watch.AnnotationFadeIn, "-30s"), bad: watch.AnnotationFadeIn},
	{name: "fade-in zero", a: on(watch.AnnotationFadeIn, "0s"), bad: watch.AnnotationFadeIn},
	{name: "fade-in word", a: on(watch.AnnotationFadeIn, "soon"), bad: watch.AnnotationFadeIn},
	{name: "fade-in exponent zero", a: on(watch.AnnotationFadeIn, "30s,0"), bad: watch.AnnotationFadeIn},
	{name: "fade-in exponent too large", a: on(watch.AnnotationFadeIn, "30s,100.5"), bad: watch.AnnotationFadeIn},
	{name: "fade-in exponent not a number", a: on(watch.AnnotationFadeIn, "30s,x"), bad: watch.AnnotationFadeIn},
	{name: "fade-in-capacity without fade-in", a: on(watch.AnnotationFadeInCapacity, "10"), bad: watch.AnnotationFadeInCapacity},
	{name: "fade-in-capacity with fade-in off", a: on(watch.AnnotationFadeIn, "off", watch.AnnotationFadeInCapacity, "10"), bad: watch.AnnotationFadeInCapacity},
	{name: "fade-in-capacity zero", a: on(watch.AnnotationFadeIn, "on", watch.AnnotationFadeInCapacity, "0"), bad: watch.AnnotationFadeInCapacity},
	{name: "fade-in-capacity above max ring", a: on(watch.AnnotationFadeIn, "on", watch.AnnotationFadeInCapacity, "4097"), bad: watch.AnnotationFadeInCapacity},
	{name: "fade-in-capacity within min-raised max ring", a: on(watch.AnnotationFadeIn, "on", watch.AnnotationMinRingSize, "5000", watch.AnnotationFadeInCapacity, "5000")},
	{name: "port by name", a: on(watch.AnnotationPort, "grpc"), ports: twoPorts},
	{name: "port by number", a: on(watch.AnnotationPort, "8080"), ports: twoPorts},
	{name: "port unknown", a: on(watch.AnnotationPort, "admin"), ports: twoPorts, bad: watch.AnnotationPort},
	{name: "port empty", a: on(watch.AnnotationPort, ""), bad: watch.AnnotationPort},
	{name: "port needed with two ports", a: on(), ports: twoPorts, bad: watch.AnnotationPort},
	{name: "no ports", a: on(), headless: true, bad: watch.AnnotationPort},
	{name: "hash-key pod-name", a: on(watch.AnnotationHashKey, watch.KubeHashKeyPodName)},
	{name: "hash-key uid", a: on(watch.AnnotationHashKey, "uid"), bad: watch.AnnotationHashKey},
	{name: "readers", a: on(watch.AnnotationReaders, "checkout, spiffe://cluster.local/ns/web/sa/frontend api.web.svc")},
	{name: "readers empty", a: on(watch.AnnotationReaders, " , "), bad: watch.AnnotationReaders},
	{name: "readers upper case", a: on(watch.AnnotationReaders, "checkout,Web"), bad: watch.AnnotationReaders},
	{name: "readers bad SPIFFE ID", a: on(watch.AnnotationReaders, "spiffe:///ns/web"), bad: watch.AnnotationReaders},
}

// TestKubeAdmissionPolicy installs the admission policy on a real API server
// and checks that it refuses exactly the Services the Go parser refuses, so
// that what kubectl accepts is what every replica serves.
func TestKubeAdmissionPolicy(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	svcs := env.Client.CoreV1().Services(ns)
	// Bad before the policy existed, one held by a finalizer as a
	// controller would hold it.
	for name, finalizers := range map[string][]string{"old-bad": nil, "old-held": {"example.com/hold"}} {
		svc := admissionCase{a: on(watch.AnnotationLBPolicy, "maglev2")}.service(name)
		svc.Finalizers = finalizers
		if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	run(t, filepath.Join(env.Bin, "kubectl"), nil, "--kubeconfig", env.Kubeconfig(t),
		"apply", "-f", filepath.Join("base", "validating-admission-policy.yaml"))
	waitForPolicy(ctx, t, env.Client, ns)

	// The policy judges only changes to what ringxds reads: a Service that
	// was bad before it existed can still be labelled, and deleted through
	// its finalizers, or it (and its namespace) would hang in Terminating.
	t.Run("pre-existing bad Service", func(t *testing.T) {
		if _, err := svcs.Patch(ctx, "old-bad", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("a label change was refused: %v", err)
		}
		if _, err := svcs.Patch(ctx, "old-bad", types.MergePatchType, []byte(`{"metadata":{"annotations":{"ringxds.io/lb-policy":"maglev3"}}}`), metav1.PatchOptions{}); err == nil {
			t.Errorf("a change to a bad ringxds.io/ value was accepted")
		}
		if err := svcs.Delete(ctx, "old-held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := svcs.Patch(ctx, "old-held", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("removing the finalizer of a Service being deleted was refused: %v", err)
		}
	})

	for i, c := range admissionCases {
		t.Run(c.name, func(t *testing.T) {
			svc := c.service(fmt.Sprintf("c%02d", i))
			problems := watch.KubeServiceProblems(svc)
			_, err := svcs.Create(ctx, svc, metav1.CreateOptions{})
			checkDecision(t, c, problems, err)
		})
	}

	// A Service that was fine and goes bad is refused on update too: this
	// is the case that split replicas before.
	t.Run("update to maglev2", func(t *testing.T) {
		c := admissionCase{a: on(watch.AnnotationLBPolicy, "maglev")}
		svc, err := svcs.Create(ctx, c.service("updated"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create the valid Service: %v", err)
		}
		svc.Annotations[watch.AnnotationLBPolicy] = "maglev2"
		problems := watch.KubeServiceProblems(svc)
		_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
		checkDecision(t, admissionCase{bad: watch.AnnotationLBPolicy}, problems, err)
	})
}

func (c admissionCase) service(name string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: c.a},
		Spec:       corev1.ServiceSpec{Ports: c.ports},
	}
	switch {
	case c.headless:
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	case c.ports == nil:
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
	}
	return svc
}

// checkDecision compares the API server's answer (err) with the Go
// parser's (problems) and the case's expectation.
func checkDecision(t *testing.T, c admissionCase, problems []string, err error) {
	t.Helper()
	if err != nil && !strings.Contains(err.Error(), policyName) {
		t.Fatalf("the API server refused the Service for another reason: %v", err)
	}
	t.Logf("parser: %q; API server: %v", problems, err)
	if c.bad != "" && !namesAnnotation(problems, c.bad) {
		t.Errorf("the parser does not name %s: %q", c.bad, problems)
	}
	switch {
	case c.gap:
		if err != nil {
			t.Errorf("the policy refused a value it cannot judge (the gap closed?): %v", err)
		}
	case c.bad == "":
		if len(problems) > 0 || err != nil {
			t.Errorf("want both to accept; parser: %q, API server: %v", problems, err)
		}
	case err == nil:
		t.Errorf("the API server accepted what the parser refuses: %q", problems)
	case !strings.Contains(err.Error(), c.bad+": "):
		t.Errorf("the refusal does not name %s: %v", c.bad, err)
	}
}

func namesAnnotation(problems []string, key string) bool {
	for _, p := range problems {
		if strings.HasPrefix(p, key+": ") {
			return true
		}
	}
	return false
}

// waitForPolicy waits until the policy is in force. The API server loads
// policies and bindings asynchronously, so it probes with a known-bad
// Service (dry run, so nothing is left behind) until that is refused.
func waitForPolicy(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	probe := admissionCase{a: on(watch.AnnotationLBPolicy, "maglev2")}.service("probe")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := client.CoreV1().Services(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), policyName) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy was not in force after 30s; last answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
