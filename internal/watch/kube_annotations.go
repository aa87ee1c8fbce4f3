package watch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/model"
)

// Annotations a Service carries to be served by ringxds. Their values mean the
// same as the file source's fields; docs/kubernetes.md is the reference.
const (
	// AnnotationEnabled opts a Service in when it is exactly "true".
	AnnotationEnabled = "ringxds.io/enabled"
	// AnnotationLBPolicy is ring_hash (default), maglev or skipper.
	AnnotationLBPolicy = "ringxds.io/lb-policy"
	// AnnotationHashHeader names the request header that is hashed.
	AnnotationHashHeader = "ringxds.io/hash-header"
	// AnnotationRingSize sets the minimum and maximum ring size to one value.
	AnnotationRingSize = "ringxds.io/ring-size"
	// AnnotationMinRingSize sets the ring_hash minimum ring size.
	AnnotationMinRingSize = "ringxds.io/min-ring-size"
	// AnnotationMaxRingSize sets the ring_hash maximum ring size.
	AnnotationMaxRingSize = "ringxds.io/max-ring-size"
	// AnnotationTableSize sets the Maglev table size (a prime).
	AnnotationTableSize = "ringxds.io/table-size"
	// AnnotationFadeIn is "off", "on", "DURATION" or "DURATION,EXPONENT".
	AnnotationFadeIn = "ringxds.io/fade-in"
	// AnnotationFadeInCapacity is the largest endpoint weight sum the ring
	// is laid out for (model.FadeIn.Capacity); it needs fade-in on.
	AnnotationFadeInCapacity = "ringxds.io/fade-in-capacity"
	// AnnotationPort picks the Service port, by name or number, whose
	// endpoints join the ring. It may be omitted when the Service has one port.
	AnnotationPort = "ringxds.io/port"
	// AnnotationHashKey names what an endpoint is hashed under instead of
	// its address: "hostname" (the EndpointSlice hostname, which a
	// StatefulSet Pod keeps across restarts) or "pod-name" (the name of the
	// Pod the endpoint refers to). Absent: the address.
	AnnotationHashKey = "ringxds.io/hash-key"
	// AnnotationReaders lists, comma- or space-separated, who may read the
	// cluster besides its own namespace when the server authorizes readers
	// (docs/xds.md, "Authorization"): namespaces, DNS names, SPIFFE IDs.
	AnnotationReaders = "ringxds.io/readers"
)

// Values of AnnotationHashKey.
const (
	KubeHashKeyHostname = "hostname"
	KubeHashKeyPodName  = "pod-name"
)

// kubeSettings is what a Service's annotations describe, before the port is
// resolved against the Service spec.
type kubeSettings struct {
	policy      model.Policy
	hashHeader  string
	minRingSize uint64
	maxRingSize uint64
	tableSize   uint64
	fadeIn      *model.FadeIn
	// port is the annotation value verbatim; empty means "the only port".
	port string
	// hashKey is KubeHashKeyHostname, KubeHashKeyPodName or empty (the
	// address).
	hashKey string
	// readers is AnnotationReaders split into its entries.
	readers []string
}

// kubeAnnotationError is a problem with one annotation of a Service.
type kubeAnnotationError struct {
	annotation string
	msg        string
}

// kubeParseSettings reads the ringxds.io/ annotations of svc. It returns every
// problem it finds, so that a user fixes them in one round, and never panics
// on input. Settings are only usable when no error is returned.
func kubeParseSettings(svc *corev1.Service) (kubeSettings, []kubeAnnotationError) {
	a := svc.Annotations
	var s kubeSettings
	var errs []kubeAnnotationError
	bad := func(key, format string, args ...any) {
		errs = append(errs, kubeAnnotationError{annotation: key, msg: fmt.Sprintf(format, args...)})
	}
	size := func(key string) uint64 {
		v, ok := a[key]
		if !ok {
			return 0
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil || n == 0 {
			bad(key, "%q is not a positive integer", v)
			return 0
		}
		return n
	}

	if v, ok := a[AnnotationLBPolicy]; ok {
		p, err := model.ParsePolicy(strings.TrimSpace(v))
		if err != nil {
			bad(AnnotationLBPolicy, "%v", err)
		}
		s.policy = p
	}
	if v, ok := a[AnnotationHashHeader]; ok {
		s.hashHeader = strings.TrimSpace(v)
		if s.hashHeader == "" {
			bad(AnnotationHashHeader, "must not be empty")
		}
	}
	if _, ok := a[AnnotationRingSize]; ok {
		_, hasMin := a[AnnotationMinRingSize]
		_, hasMax := a[AnnotationMaxRingSize]
		if hasMin || hasMax {
			bad(AnnotationRingSize, "cannot be combined with %s or %s", AnnotationMinRingSize, AnnotationMaxRingSize)
		}
		n := size(AnnotationRingSize)
		s.minRingSize, s.maxRingSize = n, n
	} else {
		s.minRingSize = size(AnnotationMinRingSize)
		s.maxRingSize = size(AnnotationMaxRingSize)
	}
	s.tableSize = size(AnnotationTableSize)
	if v, ok := a[AnnotationFadeIn]; ok {
		f, err := kubeParseFadeIn(v)
		if err != nil {
			bad(AnnotationFadeIn, "%v", err)
		}
		s.fadeIn = f
	}
	if capacity := size(AnnotationFadeInCapacity); capacity > 0 {
		if s.fadeIn == nil {
			bad(AnnotationFadeInCapacity, "has no effect without %s on", AnnotationFadeIn)
		} else {
			s.fadeIn.Capacity = capacity
		}
	}
	if v, ok := a[AnnotationPort]; ok {
		s.port = strings.TrimSpace(v)
		if s.port == "" {
			bad(AnnotationPort, "must not be empty")
		}
	}
	if v, ok := a[AnnotationHashKey]; ok {
		switch s.hashKey = strings.TrimSpace(v); s.hashKey {
		case KubeHashKeyHostname, KubeHashKeyPodName:
		default:
			bad(AnnotationHashKey, "%q: want %q or %q", v, KubeHashKeyHostname, KubeHashKeyPodName)
		}
	}
	if v, ok := a[AnnotationReaders]; ok {
		s.readers = authz.SplitList(v)
		if len(s.readers) == 0 {
			bad(AnnotationReaders, "must list at least one reader")
		}
	}
	if len(errs) > 0 {
		return s, errs
	}

	// Validate exactly as the file source does, through the model, with a
	// stand-in endpoint: endpoints are judged separately, per slice.
	c := s.cluster("check", []model.Endpoint{{Address: "10.0.0.1", Port: 1}})
	if err := c.Validate(); err != nil {
		for _, e := range kubeFlattenErrors(err) {
			var fe *model.FieldError
			key := "ringxds.io/"
			if errors.As(e, &fe) {
				key = kubeAnnotationFor(fe.Field, a)
				e = fe.Err
			}
			bad(key, "%v", e)
		}
	}
	return s, errs
}

// cluster builds a defaulted model cluster from the settings.
func (s kubeSettings) cluster(name string, eps []model.Endpoint) model.Cluster {
	c := model.Cluster{
		Name:        name,
		Policy:      s.policy,
		HashHeader:  s.hashHeader,
		MinRingSize: s.minRingSize,
		MaxRingSize: s.maxRingSize,
		TableSize:   s.tableSize,
		Readers:     s.readers,
		Endpoints:   eps,
	}
	if s.fadeIn != nil {
		f := *s.fadeIn
		c.FadeIn = &f
	}
	c.ApplyDefaults()
	return c
}

// kubeCapRingSizes lowers the ring sizes of valid settings s, defaults
// included, to maxRing (KubeOptions.MaxRingSize, at least 1), and the
// fade-in capacity with them, which may not exceed the maximum ring size.
// It returns a notice for each annotation that asked for more. Defaults
// above the cap (an operator's cap below 4096) are lowered without one:
// the Service asked for nothing.
//
// It is not part of kubeParseSettings, and so not of the admission rule
// (KubeServiceProblems): the cap is a setting of each server, which an
// admission policy shared by every replica and version cannot know, and a
// value over it is still a valid ring size.
func kubeCapRingSizes(s *kubeSettings, a map[string]string, maxRing uint64) []kubeAnnotationError {
	// The sizes the Service gets from its annotations and the defaults;
	// kubeParseSettings has checked that the minimum is not above the
	// maximum, so the maximum alone tells whether anything is over.
	c := s.cluster("cap", nil)
	if c.MaxRingSize <= maxRing {
		return nil
	}
	var out []kubeAnnotationError
	over := func(key, what string, asked uint64) {
		out = append(out, kubeAnnotationError{annotation: key, msg: fmt.Sprintf(
			"%d is above %d, the largest ring size this server gives a Service (--%s, set by its operator); the Service is served with %s %d",
			asked, maxRing, KubeMaxRingSizeFlag, what, maxRing)})
	}
	if _, ok := a[AnnotationRingSize]; ok {
		over(AnnotationRingSize, "minimum and maximum ring size", s.maxRingSize)
	} else {
		if s.minRingSize > maxRing {
			over(AnnotationMinRingSize, "minimum ring size", s.minRingSize)
		}
		if s.maxRingSize > maxRing {
			over(AnnotationMaxRingSize, "maximum ring size", s.maxRingSize)
		}
	}
	s.minRingSize, s.maxRingSize = min(c.MinRingSize, maxRing), maxRing
	if s.fadeIn != nil && s.fadeIn.Capacity > maxRing {
		out = append(out, kubeAnnotationError{annotation: AnnotationFadeInCapacity, msg: fmt.Sprintf(
			"%d is above the maximum ring size %d the Service is served with (--%s); the ring is laid out for a capacity of %d",
			s.fadeIn.Capacity, maxRing, KubeMaxRingSizeFlag, maxRing)})
		s.fadeIn.Capacity = maxRing
	}
	return out
}

// kubeParseFadeIn reads "off", "on", "30s" or "30s,2.5".
func kubeParseFadeIn(v string) (*model.FadeIn, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "off":
		return nil, nil
	case "on":
		return &model.FadeIn{}, nil
	}
	dur, exp, hasExp := strings.Cut(v, ",")
	d, err := time.ParseDuration(strings.TrimSpace(dur))
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%q: want \"off\", \"on\", a positive duration such as \"30s\", or \"30s,2.5\"", v)
	}
	f := &model.FadeIn{Duration: d}
	if hasExp {
		x, err := strconv.ParseFloat(strings.TrimSpace(exp), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: exponent %q is not a number", v, exp)
		}
		if !(x > 0 && x <= 100) {
			return nil, fmt.Errorf("%q: exponent %v must be in (0, 100]", v, x)
		}
		f.Exponent = x
	}
	return f, nil
}

// kubeAnnotationFor maps a model field path back to the annotation a user
// wrote, so that a Problem points at something they can edit.
func kubeAnnotationFor(field string, a map[string]string) string {
	switch {
	case field == "lb_policy":
		return AnnotationLBPolicy
	case field == "hash_header":
		return AnnotationHashHeader
	case field == "minimum_ring_size" || field == "maximum_ring_size":
		if _, ok := a[AnnotationRingSize]; ok {
			return AnnotationRingSize
		}
		if field == "minimum_ring_size" {
			if _, ok := a[AnnotationMinRingSize]; ok {
				return AnnotationMinRingSize
			}
			return AnnotationMaxRingSize
		}
		if _, ok := a[AnnotationMaxRingSize]; ok {
			return AnnotationMaxRingSize
		}
		return AnnotationMinRingSize
	case field == "table_size":
		if _, ok := a[AnnotationTableSize]; ok {
			return AnnotationTableSize
		}
		return AnnotationLBPolicy
	case field == "readers":
		return AnnotationReaders
	case field == "fade_in.capacity":
		return AnnotationFadeInCapacity
	case strings.HasPrefix(field, "fade_in"):
		return AnnotationFadeIn
	}
	return "ringxds.io/" + field
}

// kubeFlattenErrors undoes errors.Join so each problem is reported on its own.
func kubeFlattenErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, kubeFlattenErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// kubeResolvePort picks the Service port named by the port annotation (a name
// or a port number) and returns its name, which is how EndpointSlices label
// their ports (an unnamed single port is "").
func kubeResolvePort(svc *corev1.Service, want string) (string, error) {
	ports := svc.Spec.Ports
	if want == "" {
		switch len(ports) {
		case 1:
			return ports[0].Name, nil
		case 0:
			return "", errors.New("the Service has no ports")
		}
		names := make([]string, len(ports))
		for i, p := range ports {
			names[i] = kubePortLabel(p)
		}
		return "", fmt.Errorf("the Service has %d ports (%s); set %s to pick one", len(ports), strings.Join(names, ", "), AnnotationPort)
	}
	for _, p := range ports {
		if p.Name != "" && p.Name == want {
			return p.Name, nil
		}
	}
	if n, err := strconv.ParseInt(want, 10, 32); err == nil {
		for _, p := range ports {
			if int64(p.Port) == n {
				return p.Name, nil
			}
		}
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = kubePortLabel(p)
	}
	return "", fmt.Errorf("%q names no port of the Service (ports: %s)", want, strings.Join(names, ", "))
}

func kubePortLabel(p corev1.ServicePort) string {
	if p.Name == "" {
		return strconv.Itoa(int(p.Port))
	}
	return p.Name + "/" + strconv.Itoa(int(p.Port))
}
