package watch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/model"
)

func kubeAnnotated(a map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Annotations: a},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
}

func TestKubeParseSettings(t *testing.T) {
	tests := []struct {
		name    string
		a       map[string]string
		want    model.Cluster // only the settings fields are compared
		wantErr string        // annotation named in the first error
	}{
		{name: "defaults", a: map[string]string{},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096}},
		{name: "maglev", a: map[string]string{AnnotationLBPolicy: "maglev", AnnotationHashHeader: "x-user"},
			want: model.Cluster{Policy: model.PolicyMaglev, HashHeader: "x-user", MinRingSize: 4096, MaxRingSize: 4096, TableSize: 65537}},
		{name: "ring size sets both", a: map[string]string{AnnotationRingSize: "1024"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 1024, MaxRingSize: 1024}},
		{name: "min and max", a: map[string]string{AnnotationMinRingSize: "512", AnnotationMaxRingSize: "8192"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 512, MaxRingSize: 8192}},
		{name: "fade-in duration", a: map[string]string{AnnotationFadeIn: "45s"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096,
				FadeIn: &model.FadeIn{Duration: 45 * time.Second, Exponent: model.DefaultFadeInExponent}}},
		{name: "fade-in duration and exponent", a: map[string]string{AnnotationFadeIn: "30s, 1.5"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096,
				FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 1.5}}},
		{name: "fade-in on", a: map[string]string{AnnotationFadeIn: "on"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096,
				FadeIn: &model.FadeIn{Duration: model.DefaultFadeInDuration, Exponent: model.DefaultFadeInExponent}}},
		{name: "fade-in capacity", a: map[string]string{AnnotationFadeIn: "on", AnnotationFadeInCapacity: "256"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096,
				FadeIn: &model.FadeIn{Duration: model.DefaultFadeInDuration, Exponent: model.DefaultFadeInExponent, Capacity: 256}}},
		{name: "fade-in off", a: map[string]string{AnnotationFadeIn: "off"},
			want: model.Cluster{Policy: model.PolicyRingHash, HashHeader: model.DefaultHashHeader, MinRingSize: 4096, MaxRingSize: 4096}},

		{name: "unknown policy", a: map[string]string{AnnotationLBPolicy: "random"}, wantErr: AnnotationLBPolicy},
		{name: "upper-case header", a: map[string]string{AnnotationHashHeader: "X-User"}, wantErr: AnnotationHashHeader},
		{name: "ring size not a number", a: map[string]string{AnnotationRingSize: "big"}, wantErr: AnnotationRingSize},
		{name: "ring size zero", a: map[string]string{AnnotationRingSize: "0"}, wantErr: AnnotationRingSize},
		{name: "ring size too large", a: map[string]string{AnnotationRingSize: "9000000"}, wantErr: AnnotationRingSize},
		{name: "ring size with min", a: map[string]string{AnnotationRingSize: "1024", AnnotationMinRingSize: "8"}, wantErr: AnnotationRingSize},
		{name: "min above max", a: map[string]string{AnnotationMinRingSize: "8192", AnnotationMaxRingSize: "1024"}, wantErr: AnnotationMinRingSize},
		{name: "table size not prime", a: map[string]string{AnnotationLBPolicy: "maglev", AnnotationTableSize: "65536"}, wantErr: AnnotationTableSize},
		{name: "table size without maglev", a: map[string]string{AnnotationTableSize: "65537"}, wantErr: AnnotationTableSize},
		{name: "fade-in garbage", a: map[string]string{AnnotationFadeIn: "soon"}, wantErr: AnnotationFadeIn},
		{name: "fade-in negative", a: map[string]string{AnnotationFadeIn: "-5s"}, wantErr: AnnotationFadeIn},
		{name: "fade-in bad exponent", a: map[string]string{AnnotationFadeIn: "30s,0"}, wantErr: AnnotationFadeIn},
		{name: "fade-in capacity without fade-in", a: map[string]string{AnnotationFadeInCapacity: "256"}, wantErr: AnnotationFadeInCapacity},
		{name: "fade-in capacity above the ring", a: map[string]string{AnnotationFadeIn: "on", AnnotationFadeInCapacity: "5000"}, wantErr: AnnotationFadeInCapacity},
		{name: "empty port", a: map[string]string{AnnotationPort: " "}, wantErr: AnnotationPort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, errs := kubeParseSettings(kubeAnnotated(tt.a))
			if tt.wantErr != "" {
				if len(errs) == 0 {
					t.Fatalf("no error, want one on %s", tt.wantErr)
				}
				if errs[0].annotation != tt.wantErr {
					t.Fatalf("error on %s (%s), want on %s", errs[0].annotation, errs[0].msg, tt.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("unexpected errors: %+v", errs)
			}
			got := s.cluster("x", nil)
			got.Name = ""
			if got.Policy != tt.want.Policy || got.HashHeader != tt.want.HashHeader || got.MinRingSize != tt.want.MinRingSize ||
				got.MaxRingSize != tt.want.MaxRingSize || got.TableSize != tt.want.TableSize ||
				(got.FadeIn == nil) != (tt.want.FadeIn == nil) || (got.FadeIn != nil && *got.FadeIn != *tt.want.FadeIn) {
				t.Fatalf("got %+v (fade-in %+v), want %+v (fade-in %+v)", got, got.FadeIn, tt.want, tt.want.FadeIn)
			}
		})
	}
}

func TestKubeResolvePort(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80}
	grpc := corev1.ServicePort{Name: "grpc", Port: 9000}
	unnamed := corev1.ServicePort{Port: 8080}
	tests := []struct {
		name    string
		ports   []corev1.ServicePort
		want    string
		result  string
		wantErr string
	}{
		{name: "single unnamed port", ports: []corev1.ServicePort{unnamed}, result: ""},
		{name: "single named port", ports: []corev1.ServicePort{http}, result: "http"},
		{name: "by name", ports: []corev1.ServicePort{http, grpc}, want: "grpc", result: "grpc"},
		{name: "by number", ports: []corev1.ServicePort{http, grpc}, want: "9000", result: "grpc"},
		{name: "ambiguous", ports: []corev1.ServicePort{http, grpc}, wantErr: "2 ports (http/80, grpc/9000)"},
		{name: "no ports", wantErr: "no ports"},
		{name: "unknown name", ports: []corev1.ServicePort{http}, want: "admin", wantErr: `"admin" names no port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kubeResolvePort(kubeAnnotated(nil, tt.ports...), tt.want)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.result {
				t.Fatalf("got %q, %v; want %q", got, err, tt.result)
			}
		})
	}
}

// Ring sizes over the operator's cap are lowered to it, not refused: the
// Service is served, and each annotation that asked for more is named with
// its value, the cap and the flag that sets it.
func TestKubeCapRingSizes(t *testing.T) {
	const maxRing = 65536
	fade := map[string]string{AnnotationFadeIn: "on"}
	with := func(base map[string]string, kv ...string) map[string]string {
		a := map[string]string{}
		for k, v := range base {
			a[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	tests := []struct {
		name             string
		a                map[string]string
		maxRing          uint64
		minSize, maxSize uint64
		capacity         uint64
		notices          []string // annotation and value of each notice
	}{
		{name: "defaults fit", a: map[string]string{}, maxRing: maxRing, minSize: 4096, maxSize: 4096},
		{name: "at the cap", a: with(nil, AnnotationRingSize, "65536"), maxRing: maxRing, minSize: maxRing, maxSize: maxRing},
		{name: "ring size over", a: with(fade, AnnotationRingSize, "8388608"), maxRing: maxRing, minSize: maxRing, maxSize: maxRing,
			notices: []string{AnnotationRingSize + " 8388608"}},
		{name: "max over, min defaulted", a: with(nil, AnnotationMaxRingSize, "1000000"), maxRing: maxRing, minSize: 1024, maxSize: maxRing,
			notices: []string{AnnotationMaxRingSize + " 1000000"}},
		{name: "min over, max defaulted", a: with(nil, AnnotationMinRingSize, "100000"), maxRing: maxRing, minSize: maxRing, maxSize: maxRing,
			notices: []string{AnnotationMinRingSize + " 100000"}},
		{name: "both over", a: with(nil, AnnotationMinRingSize, "70000", AnnotationMaxRingSize, "80000"), maxRing: maxRing, minSize: maxRing, maxSize: maxRing,
			notices: []string{AnnotationMinRingSize + " 70000", AnnotationMaxRingSize + " 80000"}},
		{name: "max over, min fits", a: with(nil, AnnotationMinRingSize, "2048", AnnotationMaxRingSize, "131072"), maxRing: maxRing, minSize: 2048, maxSize: maxRing,
			notices: []string{AnnotationMaxRingSize + " 131072"}},
		{name: "capacity over with the ring", a: with(fade, AnnotationRingSize, "1048576", AnnotationFadeInCapacity, "100000"), maxRing: maxRing,
			minSize: maxRing, maxSize: maxRing, capacity: maxRing,
			notices: []string{AnnotationRingSize + " 1048576", AnnotationFadeInCapacity + " 100000"}},
		{name: "capacity under the cap kept", a: with(fade, AnnotationRingSize, "1048576", AnnotationFadeInCapacity, "100"), maxRing: maxRing,
			minSize: maxRing, maxSize: maxRing, capacity: 100, notices: []string{AnnotationRingSize + " 1048576"}},
		// An operator's cap below the defaults lowers them without a
		// notice: the Service asked for nothing.
		{name: "defaults over a low cap", a: map[string]string{}, maxRing: 1000, minSize: 1000, maxSize: 1000},
		{name: "min fits a low cap, max defaulted", a: with(nil, AnnotationMinRingSize, "512"), maxRing: 1000, minSize: 512, maxSize: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			var msgs []string
			s, _, ok := kubeServiceSettings(kubeAnnotated(tt.a, corev1.ServicePort{Name: "http", Port: 80}), tt.maxRing,
				func(kind, object, field, format string, args ...any) {
					msg := fmt.Sprintf(format, args...)
					if kind != "annotation" || object != "ns/svc" {
						t.Errorf("notice %s %s %s: %s", kind, object, field, msg)
					}
					got = append(got, field+" "+strings.Fields(msg)[0])
					msgs = append(msgs, msg)
				})
			if !ok {
				t.Fatalf("not served; notices %q", msgs)
			}
			c := s.cluster("svc.ns", []model.Endpoint{{Address: "10.0.0.1", Port: 80}})
			if err := c.Validate(); err != nil {
				t.Fatalf("capped cluster is invalid: %v", err)
			}
			if c.MinRingSize != tt.minSize || c.MaxRingSize != tt.maxSize {
				t.Errorf("ring sizes %d..%d, want %d..%d", c.MinRingSize, c.MaxRingSize, tt.minSize, tt.maxSize)
			}
			if c.FadeIn != nil && c.FadeIn.Capacity != tt.capacity {
				t.Errorf("fade-in capacity %d, want %d", c.FadeIn.Capacity, tt.capacity)
			}
			if !slices.Equal(got, tt.notices) {
				t.Fatalf("notices %q, want on %q", msgs, tt.notices)
			}
			for _, m := range msgs {
				for _, w := range []string{strconv.FormatUint(tt.maxRing, 10), "--" + KubeMaxRingSizeFlag, "served with"} {
					if !strings.Contains(m, w) {
						t.Errorf("notice %q does not say %q", m, w)
					}
				}
			}
		})
	}
}

// The cap is a server setting: the admission rule, which every replica and
// version shares, does not judge it.
func TestKubeServiceProblemsIgnoreTheCap(t *testing.T) {
	svc := kubeAnnotated(map[string]string{AnnotationEnabled: "true", AnnotationRingSize: "8388608"}, corev1.ServicePort{Name: "http", Port: 80})
	if p := KubeServiceProblems(svc); p != nil {
		t.Fatalf("problems %q for a ring size Envoy accepts", p)
	}
}
