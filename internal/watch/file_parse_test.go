package watch_test

import (
	"errors"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/watch"
)

const fileFullYAML = `clusters:
  - name: products
    lb_policy: ring_hash
    hash_header: x-product-id
    minimum_ring_size: 1024
    maximum_ring_size: 2048
    fade_in: {duration: 45s, exponent: 1.5}
    endpoints:
      - {address: 10.0.0.1, port: 8080, weight: 1, scheme: https, zone: eu-central-1a}
      - {address: "2001:db8::1", port: 8081, weight: 3, scheme: h2c, zone: eu-central-1b, hash_key: "p-2"}
  - name: inventory
    lb_policy: maglev
    table_size: 251
    endpoints:
      - address: 10.0.1.7
        port: 9000
  - name: catalog
    lb_policy: skipper
    fade_in: {}
    endpoints:
      - {address: 10.0.0.3, port: 80}
`

// fileFullJSON is fileFullYAML written as JSON, as a user converting by hand
// (or with a tool) would.
const fileFullJSON = `{"clusters": [
  {"name": "products", "lb_policy": "ring_hash", "hash_header": "x-product-id",
   "minimum_ring_size": 1024, "maximum_ring_size": 2048,
   "fade_in": {"duration": "45s", "exponent": 1.5},
   "endpoints": [
     {"address": "10.0.0.1", "port": 8080, "weight": 1, "scheme": "https", "zone": "eu-central-1a"},
     {"address": "2001:db8::1", "port": 8081, "weight": 3, "scheme": "h2c", "zone": "eu-central-1b", "hash_key": "p-2"}]},
  {"name": "inventory", "lb_policy": "maglev", "table_size": 251,
   "endpoints": [{"address": "10.0.1.7", "port": 9000}]},
  {"name": "catalog", "lb_policy": "skipper", "fade_in": {},
   "endpoints": [{"address": "10.0.0.3", "port": 80}]}
]}`

func TestFileParseHonoursEveryFieldAndAppliesDefaults(t *testing.T) {
	want := model.State{Clusters: []model.Cluster{
		{
			Name: "catalog", Policy: model.PolicySkipper, HashHeader: model.DefaultHashHeader,
			MinRingSize: model.DefaultRingSize, MaxRingSize: model.DefaultRingSize,
			FadeIn:    &model.FadeIn{Duration: model.DefaultFadeInDuration, Exponent: model.DefaultFadeInExponent},
			Endpoints: []model.Endpoint{{Address: "10.0.0.3", Port: 80, Weight: 1, Scheme: "http"}},
		},
		{
			Name: "inventory", Policy: model.PolicyMaglev, HashHeader: model.DefaultHashHeader,
			MinRingSize: model.DefaultRingSize, MaxRingSize: model.DefaultRingSize, TableSize: 251,
			Endpoints: []model.Endpoint{{Address: "10.0.1.7", Port: 9000, Weight: 1, Scheme: "http"}},
		},
		{
			Name: "products", Policy: model.PolicyRingHash, HashHeader: "x-product-id",
			MinRingSize: 1024, MaxRingSize: 2048,
			FadeIn: &model.FadeIn{Duration: 45 * time.Second, Exponent: 1.5},
			Endpoints: []model.Endpoint{
				{Address: "10.0.0.1", Port: 8080, Weight: 1, Scheme: "https", Zone: "eu-central-1a"},
				{Address: "2001:db8::1", Port: 8081, Weight: 3, Scheme: "h2c", Zone: "eu-central-1b", HashKey: "p-2"},
			},
		},
	}}

	fromYAML, err := watch.ParseFile("endpoints.yaml", []byte(fileFullYAML))
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	if !reflect.DeepEqual(fromYAML, want) {
		t.Errorf("YAML state:\n got %+v\nwant %+v", fromYAML, want)
	}
	fromJSON, err := watch.ParseFile("endpoints.json", []byte(fileFullJSON))
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("JSON and YAML disagree:\nJSON %+v\nYAML %+v", fromJSON, fromYAML)
	}
}

func TestFileParseAcceptsEmptyClusterListAndNulls(t *testing.T) {
	st, err := watch.ParseFile("f.yaml", []byte("clusters: []\n"))
	if err != nil || len(st.Clusters) != 0 {
		t.Fatalf("explicit empty list: state %+v, err %v", st, err)
	}
	// "key:" with nothing after it means the field is omitted.
	st, err = watch.ParseFile("f.yaml", []byte("clusters:\n  - name: a\n    fade_in:\n    endpoints:\n      - {address: 10.0.0.1, port: 80, zone: }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Clusters[0]; c.FadeIn != nil || c.Endpoints[0].Zone != "" {
		t.Errorf("null fields were not treated as omitted: %+v", c)
	}
}

func TestFileParseErrorsNameFileLineAndField(t *testing.T) {
	const head = "clusters:\n  - name: products\n" // lines 1-2
	tests := []struct {
		name  string
		input string
		line  int
		field string // empty: the error concerns the whole file
		msg   string
	}{
		{"unknown cluster field", head + "    hash_heder: x-id\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].hash_heder", `unknown field "hash_heder" (did you mean "hash_header"?)`},
		{"unknown endpoint field", head + "    endpoints:\n      - address: 10.0.0.1\n        prot: 80\n",
			5, "clusters[0].endpoints[0].prot", `did you mean "port"`},
		{"unknown top-level field", "clusterz: []\n", 1, "clusterz", "unknown field"},
		{"bad policy", head + "    lb_policy: round_robin\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].lb_policy", `unknown lb_policy "round_robin"`},
		{"non-prime table size", head + "    lb_policy: maglev\n    table_size: 65536\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			4, "clusters[0].table_size", "must be a prime"},
		{"table size on ring_hash", head + "    table_size: 65537\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].table_size", "applies only to lb_policy maglev"},
		{"duplicate endpoint", head + "    endpoints:\n      - {address: 10.0.0.1, port: 80}\n      - {address: 10.0.0.2, port: 80}\n      - {address: 10.0.0.1, port: 80}\n",
			6, "clusters[0].endpoints[2]", "duplicates endpoints[0] (10.0.0.1:80) on line 4"},
		{"one address spelt twice", head + "    endpoints:\n      - {address: \"fd00::1\", port: 80}\n      - {address: \"FD00:0:0::0001\", port: 80}\n",
			5, "clusters[0].endpoints[1]", `duplicates endpoints[0] ([fd00::1]:80) on line 4: "FD00:0:0::0001" here and "fd00::1" there are one address, published as fd00::1`},
		{"DNS name", head + "    endpoints:\n      - {address: backend-0.example.internal, port: 80}\n",
			4, "clusters[0].endpoints[0].address", `"backend-0.example.internal" is a DNS name, and endpoints take IP addresses only`},
		{"IPv6 zone", head + "    endpoints:\n      - {address: \"fe80::1%eth0\", port: 80}\n",
			4, "clusters[0].endpoints[0].address", `"fe80::1%eth0" has an IPv6 zone (%eth0)`},
		{"IPv4-mapped", head + "    endpoints:\n      - {address: \"::FFFF:10.0.0.2\", port: 80}\n",
			4, "clusters[0].endpoints[0].address", `"::FFFF:10.0.0.2" is an IPv4-mapped IPv6 address: write it as 10.0.0.2`},
		{"port in the address", head + "    endpoints:\n      - {address: \"10.0.0.1:8080\", port: 8080}\n",
			4, "clusters[0].endpoints[0].address", `"10.0.0.1:8080" includes a port: write the address 10.0.0.1 here and 8080 in port`},
		{"not an address", head + "    endpoints:\n      - {address: \"10.0.0.300\", port: 80}\n",
			4, "clusters[0].endpoints[0].address", `"10.0.0.300" is not an IPv4 or IPv6 address`},
		{"port out of range", head + "    endpoints:\n      - {address: 10.0.0.1, port: 70000}\n",
			4, "clusters[0].endpoints[0].port", "70000 is outside 1..65535"},
		{"negative port", head + "    endpoints:\n      - address: 10.0.0.1\n        port: -1\n",
			5, "clusters[0].endpoints[0].port", "-1 is negative"},
		{"port as text", head + "    endpoints:\n      - {address: 10.0.0.1, port: http}\n",
			4, "clusters[0].endpoints[0].port", `want a positive integer, got the string "http"`},
		{"zero weight", head + "    endpoints:\n      - {address: 10.0.0.1, port: 80, weight: 0}\n",
			4, "clusters[0].endpoints[0].weight", "must be at least 1"},
		{"missing address", head + "    endpoints:\n      - port: 80\n",
			4, "clusters[0].endpoints[0].address", "must not be empty"},
		{"bad duration", head + "    fade_in: {duration: 30 seconds}\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].fade_in.duration", `"30 seconds" is not a duration`},
		{"duration without unit", head + "    fade_in:\n      duration: 30\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			4, "clusters[0].fade_in.duration", "want a duration such as 30s"},
		{"capacity zero", head + "    fade_in:\n      capacity: 0\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			4, "clusters[0].fade_in.capacity", "must be at least 1"},
		{"negative exponent", head + "    fade_in:\n      exponent: -2\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			4, "clusters[0].fade_in.exponent", "must be positive"},
		{"boolean as string", head + "    hash_header: true\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].hash_header", "got the boolean true; quote it"},
		{"bad header", head + "    hash_header: X-Product-Id\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].hash_header", "not a valid lower-case HTTP header name"},
		{"min above max ring size", head + "    minimum_ring_size: 4096\n    maximum_ring_size: 1024\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			3, "clusters[0].minimum_ring_size", "larger than maximum_ring_size"},
		{"empty endpoints", head + "    endpoints: []\n",
			3, "clusters[0].endpoints", "must list at least one endpoint"},
		{"endpoints omitted", head + "    lb_policy: ring_hash\n",
			2, "clusters[0].endpoints", "must list at least one endpoint"},
		{"endpoints not a list", head + "    endpoints: {address: 10.0.0.1}\n",
			3, "clusters[0].endpoints", "want a list of endpoints, got a mapping"},
		{"duplicate cluster name", head + "    endpoints: [{address: 10.0.0.1, port: 80}]\n  - name: products\n    endpoints: [{address: 10.0.0.2, port: 80}]\n",
			4, "clusters[1].name", `cluster name "products" is already used on line 2`},
		{"field given twice", head + "    lb_policy: maglev\n    lb_policy: ring_hash\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			4, "clusters[0].lb_policy", "given twice (first on line 3)"},
		// For syntax errors the YAML library names the line where the
		// broken construct starts: here the unclosed '['.
		{"YAML syntax error", head + "    endpoints: [{address: 10.0.0.1, port: 80}\n    lb_policy: maglev\n",
			3, "", "invalid YAML: did not find expected ',' or ']'"},
		{"unclosed flow mapping", head + "    endpoints:\n      - {address: 10.0.0.1, port: 80\n      - {address: 10.0.0.2, port: 80}\n",
			4, "", "did not find expected ',' or '}'"},
		{"bad indentation", head + "    endpoints:\n      - address: 10.0.0.1\n       port: 80\n",
			4, "", "invalid YAML"},
		{"tab indentation", "clusters:\n\t- name: a\n", 2, "", "invalid YAML"},
		{"empty file", "", 0, "", "the file is empty"},
		{"comments only", "# nothing yet\n", 0, "", "the file is empty"},
		{"top level is a list", "- name: products\n", 1, "", "top level must be a mapping"},
		{"two documents", "clusters: []\n---\nclusters: []\n", 2, "", "second YAML document"},
		{"merge key", "base: &b {port: 80}\n", 1, "base", "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := watch.ParseFile("conf/endpoints.yaml", []byte(tc.input))
			if err == nil {
				t.Fatalf("no error; state %+v", st)
			}
			if len(st.Clusters) != 0 {
				t.Errorf("a partial state came back with the error: %+v", st)
			}
			msg := err.Error()
			wantLoc := "conf/endpoints.yaml:"
			if tc.line > 0 {
				wantLoc += strconv.Itoa(tc.line) + ":"
			}
			if !strings.HasPrefix(msg, wantLoc) {
				t.Errorf("error %q does not start with %q", msg, wantLoc)
			}
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q lacks field %q or message %q", msg, tc.field, tc.msg)
			}
			fes := watch.FileErrors(err)
			if len(fes) == 0 {
				t.Fatalf("error %q holds no *watch.FileError", msg)
			}
			if fe := fes[0]; fe.Path != "conf/endpoints.yaml" || fe.Line != tc.line || fe.Field != tc.field {
				t.Errorf("first FileError = {Path %q Line %d Field %q}, want {conf/endpoints.yaml %d %q}",
					fe.Path, fe.Line, fe.Field, tc.line, tc.field)
			}
		})
	}
}

func TestFileParseReportsEveryProblemInLineOrder(t *testing.T) {
	input := `clusters:
  - name: a
    lb_policy: maglev
    table_size: 100
    endpoints:
      - {address: 10.0.0.1, port: 0}
  - name: b
    endpoints:
      - {address: "not an address", port: 80}
`
	_, err := watch.ParseFile("f.yaml", []byte(input))
	fes := watch.FileErrors(err)
	var got []string
	for _, fe := range fes {
		got = append(got, strconv.Itoa(fe.Line)+" "+fe.Field)
	}
	// Line 6 fails in parsing (an explicit zero); the model's checks of
	// the rest still run and find lines 4 and 9.
	want := []string{"4 clusters[0].table_size", "6 clusters[0].endpoints[0].port", "9 clusters[1].endpoints[0].address"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems %q, want %q (err: %v)", got, want, err)
	}

	_, err = watch.ParseFile("f.yaml", []byte(strings.Replace(input, "port: 0", "port: 80", 1)))
	got = got[:0]
	for _, fe := range watch.FileErrors(err) {
		got = append(got, strconv.Itoa(fe.Line)+" "+fe.Field)
		if fe.Cluster == "" {
			t.Errorf("problem %v does not name its cluster", fe)
		}
	}
	want = []string{"4 clusters[0].table_size", "9 clusters[1].endpoints[0].address"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems %q, want %q (err: %v)", got, want, err)
	}
	var fe *watch.FileError
	if !errors.As(err, &fe) {
		t.Errorf("errors.As cannot find a *FileError in %v", err)
	}
}

func TestFileParseEmbeddedExample(t *testing.T) {
	st, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatalf("the embedded example is invalid: %v", err)
	}
	policies := map[model.Policy]bool{}
	for _, c := range st.Clusters {
		policies[c.Policy] = true
		if len(c.Endpoints) != 3 {
			t.Errorf("cluster %s has %d endpoints, want 3", c.Name, len(c.Endpoints))
		}
		// The example promises identical rings in Envoy, grpc-go and
		// ringxds: equal weights, or a power-of-two sum that fits the ring.
		var sum uint32
		equal := true
		for _, ep := range c.Endpoints {
			sum += ep.Weight
			equal = equal && ep.Weight == c.Endpoints[0].Weight
			if ep.Address != "127.0.0.1" || ep.Zone == "" {
				t.Errorf("cluster %s endpoint %s: want a zoned 127.0.0.1 backend", c.Name, ep.HostPort())
			}
		}
		if !equal && (bits.OnesCount32(sum) != 1 || uint64(sum) > c.MinRingSize) {
			t.Errorf("cluster %s weights sum to %d: rings would differ between clients", c.Name, sum)
		}
		if c.MaxRingSize > model.DefaultRingSize {
			t.Errorf("cluster %s maximum_ring_size %d exceeds grpc-go's cap %d", c.Name, c.MaxRingSize, model.DefaultRingSize)
		}
	}
	for _, p := range model.Policies {
		if !policies[p] {
			t.Errorf("the example has no %s cluster", p)
		}
	}
}

// readers lists who may read a cluster besides its own namespace (docs/xds.md,
// "Authorization"): namespaces, DNS names and SPIFFE IDs; anything else is
// an error at its line.
func TestFileParseReaders(t *testing.T) {
	const file = "clusters:\n  - name: products.shop\n    readers: [checkout, \"spiffe://cluster.local/ns/web/sa/frontend\", api.web.svc]\n    endpoints:\n      - {address: 10.0.0.1, port: 8080}\n"
	st, err := watch.ParseFile("f.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Clusters[0].Readers, []string{"checkout", "spiffe://cluster.local/ns/web/sa/frontend", "api.web.svc"}; !slices.Equal(got, want) {
		t.Fatalf("readers = %q, want %q", got, want)
	}
	_, err = watch.ParseFile("f.yaml", []byte(strings.Replace(file, "checkout", "Bad_Name", 1)))
	if errs := watch.FileErrors(err); len(errs) != 1 || errs[0].Line != 3 || errs[0].Field != "clusters[0].readers" || !strings.Contains(errs[0].Error(), "Bad_Name") {
		t.Fatalf("errors = %v, want one at line 3 naming the bad reader", errs)
	}
	_, err = watch.ParseFile("f.yaml", []byte(strings.Replace(file, "readers: [checkout, \"spiffe://cluster.local/ns/web/sa/frontend\", api.web.svc]", "readers: checkout", 1)))
	if err == nil || !strings.Contains(err.Error(), "want a list of strings") {
		t.Fatalf("a mapping for readers: %v", err)
	}
}
