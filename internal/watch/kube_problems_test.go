package watch

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/client-go/kubernetes/fake"
)

func kubeManyProblems(n int) []kubeProblem {
	found := make([]kubeProblem, n)
	for i := range found {
		found[i] = kubeProblem{kind: "endpointslice", Problem: Problem{
			Source: "kubernetes", Object: fmt.Sprintf("ns/slice-%d", n-i), Field: "ports", Message: `no port named "http"; its endpoints are skipped`,
		}}
	}
	return found
}

// TestKubeSetProblemsAtScale: tens of thousands of problems are all listed
// and counted, each once, but only a bounded number is logged one by one,
// and a problem that persists keeps its first Since and is not logged again.
func TestKubeSetProblemsAtScale(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	s, err := NewKubeSource(fake.NewClientset(), KubeOptions{Logger: zap.New(core), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30000
	found := kubeManyProblems(n)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s.kubeSetProblems(append(found, found[0]), t0)
	if got := len(s.Problems()); got != n {
		t.Fatalf("%d problems listed, want %d (a duplicate counts once)", got, n)
	}
	if got := testutil.ToFloat64(s.metrics.problems.WithLabelValues("endpointslice")); got != n {
		t.Fatalf("ringxds_kube_problems_total = %v, want %d", got, n)
	}
	if got := logs.Len(); got != kubeLoggedProblems+1 {
		t.Fatalf("%d log lines for %d new problems, want %d and one summary", got, n, kubeLoggedProblems)
	}
	if p := s.Problems(); !slices.IsSortedFunc(p, func(a, b Problem) int { return strings.Compare(a.Object, b.Object) }) {
		t.Fatalf("problems of one Since are not in object order: first %q, last %q", p[0].Object, p[n-1].Object)
	}

	// The same problems a second later, one fixed and one new.
	logs.TakeAll()
	next := append(found[1:], kubeProblem{kind: "annotation", Problem: Problem{Source: "kubernetes", Object: "ns/svc", Field: AnnotationLBPolicy, Message: "bad"}})
	s.kubeSetProblems(next, t0.Add(time.Second))
	p := s.Problems()
	if len(p) != n || !p[0].Since.Equal(t0) || !p[n-1].Since.Equal(t0.Add(time.Second)) || p[n-1].Object != "ns/svc" {
		t.Fatalf("after the second rebuild: %d problems, first since %v, last %+v", len(p), p[0].Since, p[n-1])
	}
	if got := logs.Len(); got != 1 {
		t.Fatalf("%d log lines, want one for the one new problem", got)
	}
}

// BenchmarkKubeSetProblems is a rebuild's cost of new and of standing
// problems, with a JSON logger as in production writing to a file (one
// write call per line, as to stderr; here os.DevNull).
func BenchmarkKubeSetProblems(b *testing.B) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(f), zap.InfoLevel))
	for _, n := range []int{3000, 30000} {
		b.Run(fmt.Sprintf("new=%d", n), func(b *testing.B) {
			found := kubeManyProblems(n)
			s, err := NewKubeSource(fake.NewClientset(), KubeOptions{Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for b.Loop() {
				s.problemSince, s.problems = nil, nil
				s.kubeSetProblems(found, now)
			}
		})
		b.Run(fmt.Sprintf("standing=%d", n), func(b *testing.B) {
			found := kubeManyProblems(n)
			s, err := NewKubeSource(fake.NewClientset(), KubeOptions{Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			s.kubeSetProblems(found, now)
			for b.Loop() {
				s.kubeSetProblems(found, now)
			}
		})
	}
}
