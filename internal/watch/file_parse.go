package watch

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/suggest"
)

// FileError is one problem found in an endpoints file, located to the line
// and column of the YAML node at fault so that an operator can jump to it.
type FileError struct {
	// Path is the file as the user named it.
	Path string
	// Line and Column are 1-based; zero when the problem concerns the whole
	// file (it is empty, or cannot be read).
	Line, Column int
	// Field is the offending field's path from the top of the file, such as
	// "clusters[0].endpoints[2].port"; empty for syntax and read errors.
	Field string
	// Cluster is the name of the cluster the field belongs to, when known.
	Cluster string
	// Err says what is wrong.
	Err error
}

// Error renders the compiler-style "path:line:col: field: problem" form that
// editors and terminals turn into links.
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		if e.Cluster != "" {
			fmt.Fprintf(&b, " (cluster %q)", e.Cluster)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap gives errors.Is and errors.As access to the underlying problem.
func (e *FileError) Unwrap() error { return e.Err }

// FileErrors lists the *FileError values inside an error returned by
// ParseFile or FileSource.Load, in file order, followed, when problems were
// left out, by one without a line that counts them. It returns nil for an
// error that holds none.
func FileErrors(err error) []*FileError {
	var out []*FileError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FileError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// ParseFile turns the bytes of an endpoints file into a validated,
// normalized model.State. path is used only to name the file in errors.
// JSON is accepted too, since it is YAML.
//
// The problems found are reported, each as a *FileError naming the file,
// line, column and field, the first 100 in line order and then one more
// saying how many were left out; the returned error joins them (see
// FileErrors).
// ParseFile is pure: it touches no file and keeps no state, and the
// returned State has zero FirstSeen and ChangedAt.
func ParseFile(path string, data []byte) (model.State, error) {
	p := &fileParser{path: path, lines: fileLineCount(data)}
	state, locs := p.parse(data)
	// The model's checks run on whatever parsed, beside the problems of
	// what did not: an operator fixing a file sees everything to fix at
	// once, not one layer of problems per attempt.
	p.validate(&state, locs)
	if p.found > 0 {
		return model.State{}, p.err()
	}
	// The per-cluster checks above already passed, so this only sorts; it
	// still runs the model's checks so that no state bypasses them.
	if err := state.Normalize(); err != nil {
		return model.State{}, &FileError{Path: path, Err: err}
	}
	return state, nil
}

// fileParser walks the yaml.Node tree by hand instead of decoding into
// structs, because only the node tree knows where each value sits in the
// file, and because explicit zero values must be told apart from omitted
// ones (the model treats zero as "use the default").
type fileParser struct {
	path string
	// errs holds the first problems in line order, at most
	// 2*fileMaxProblems at any time (see add).
	errs []*FileError
	// found counts every problem, listed or not.
	found int
	// lines is the file's line count as the YAML parser counts lines;
	// no problem is placed past it.
	lines int
	// cur is the cluster being walked, whose refused fields errorf
	// records; nil outside the walk of a cluster.
	cur *fileClusterLocs
}

// fileMaxProblems is how many problems one file reports. A generated file
// with a systematic mistake can hold one per endpoint; past the first
// hundred more of the same only floods the log, the debug page and the
// memory holding them, and the count says how far off the file is.
const fileMaxProblems = 100

// fileClusterLocs remembers, for one cluster, the node of every field by its
// model path ("endpoints[2].port"), so that model.FieldError paths can be
// mapped back to lines, and what the parse could not read.
type fileClusterLocs struct {
	index int
	// prefix is the cluster's path in the file, "clusters[index]".
	prefix string
	node   *yaml.Node
	nodes  map[string]*yaml.Node
	// refused holds the model paths whose value was refused and so left
	// at zero, as if omitted: "" for the whole cluster, "lb_policy",
	// "endpoints[2].port". The model's checks of those fields would only
	// repeat the problem, wrongly (see hides). Nil when nothing was.
	refused map[string]bool
	// around holds the paths that enclose a refused one ("endpoints[2]",
	// "endpoints"), so that hides costs the depth of a path, not the
	// number of refused values.
	around map[string]bool
}

// hides reports whether a model error at field (a model path) would follow
// from a refused value rather than from the file: the refused field itself,
// a field inside or around it, or a check that reads it. A refused port is
// left at 0, which the model calls out of range; a refused lb_policy leaves
// ring_hash, for which any table_size is wrong; a refused
// maximum_ring_size leaves the default, which fade_in.capacity may exceed.
func (l *fileClusterLocs) hides(field string) bool {
	switch {
	case l.refused == nil:
		return false
	case field == "table_size" && l.refused["lb_policy"],
		field == "fade_in.capacity" && l.refused["maximum_ring_size"],
		l.around[field]:
		return true
	}
	for f := field; ; f = fileFieldParent(f) {
		if l.refused[f] {
			return true
		}
		if f == "" {
			return false
		}
	}
}

// apart returns the endpoints whose identity (address, port or hash_key)
// was refused, by index: they are checked on their own fields only, since
// one read without its port would be compared as port 0. Nil when none
// was.
func (l *fileClusterLocs) apart() map[int]bool {
	var out map[int]bool
	for r := range l.refused {
		rest, ok := strings.CutPrefix(r, "endpoints[")
		if !ok {
			continue
		}
		num, field, ok := strings.Cut(rest, "]")
		j, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		switch field {
		case "", ".address", ".port", ".hash_key":
			if out == nil {
				out = map[int]bool{}
			}
			out[j] = true
		}
	}
	return out
}

// fileFieldParent is the path enclosing a model path: "endpoints[2]" for
// "endpoints[2].port", "endpoints" for "endpoints[2]", "" (the whole
// cluster) for "endpoints".
func fileFieldParent(field string) string {
	return field[:max(strings.LastIndexByte(field, '.'), strings.LastIndexByte(field, '['), 0)]
}

// fileYAMLParserProblem reports the messages of yaml/v3's parser (parserc.go),
// as opposed to its scanner, whose line numbers need no correction.
func fileYAMLParserProblem(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'",
		"did not find expected ',' or '}'",
		"did not find expected '-' indicator",
		"did not find expected <document start>",
		"did not find expected <stream-start>",
		"did not find expected key",
		"did not find expected node content",
		"found duplicate %TAG directive",
		"found duplicate %YAML directive",
		"found incompatible YAML document",
		"found undefined tag handle":
		return true
	}
	return false
}

// err joins the first fileMaxProblems problems in line order, and a last
// one saying how many more there are.
func (p *fileParser) err() error {
	p.keepFirst()
	errs := make([]error, 0, len(p.errs)+1)
	for _, e := range p.errs {
		errs = append(errs, e)
	}
	if more := p.found - len(p.errs); more > 0 {
		errs = append(errs, &FileError{Path: p.path, Err: fileMoreProblems(more)})
	}
	return errors.Join(errs...)
}

// fileMoreProblems counts the problems of a file that were not listed, so
// that the source's problems gauge can still count them all.
type fileMoreProblems int

func (n fileMoreProblems) Error() string {
	return fmt.Sprintf("%d more problems are not listed: only the first %d, in line order, are reported", int(n), fileMaxProblems)
}

// add records a problem. The list is cut back to the first
// fileMaxProblems in line order whenever it doubles that, so memory stays
// bounded and sorting costs O(log fileMaxProblems) per problem, while the
// result is that of sorting every problem (stably: ties keep the order
// they were found in) and keeping the first.
func (p *fileParser) add(fe *FileError) {
	p.found++
	p.errs = append(p.errs, fe)
	if len(p.errs) >= 2*fileMaxProblems {
		p.keepFirst()
	}
}

func (p *fileParser) keepFirst() {
	slices.SortStableFunc(p.errs, func(a, b *FileError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if len(p.errs) > fileMaxProblems {
		clear(p.errs[fileMaxProblems:])
		p.errs = p.errs[:fileMaxProblems]
	}
}

// errorf reports a problem with the value of field, at node n. In the
// walk of a cluster the value is refused: the field is recorded so that
// the model's checks leave it out.
func (p *fileParser) errorf(n *yaml.Node, field, cluster, format string, args ...any) {
	p.report(n, field, cluster, format, args...)
	p.refuse(field)
}

// report records a problem at node n without refusing field's value: for
// a problem with a key, whose value is read (a key given twice) or was
// never there (an unknown one).
func (p *fileParser) report(n *yaml.Node, field, cluster, format string, args ...any) {
	fe := &FileError{Path: p.path, Field: field, Cluster: cluster, Err: fmt.Errorf(format, args...)}
	if n != nil {
		fe.Line, fe.Column = n.Line, n.Column
		if fe.Line > p.lines {
			// yaml/v3 places a node that ends the file (an empty
			// document's null) on the line after the last.
			fe.Line, fe.Column = p.lines, 0
		}
	}
	p.add(fe)
}

// fileLineCount counts data's lines as yaml/v3 does: CRLF, CR and LF each
// end a line, and so do the Unicode breaks NEL, LS and PS.
func fileLineCount(data []byte) int {
	n := 1
	for i := 0; i < len(data); i++ {
		switch {
		case data[i] == '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				i++
			}
			n++
		case data[i] == '\n':
			n++
		case bytes.HasPrefix(data[i:], []byte("\u0085")), bytes.HasPrefix(data[i:], []byte("\u2028")), bytes.HasPrefix(data[i:], []byte("\u2029")):
			n++
		}
	}
	return n
}

// refuse records field, a path in the file, as refused in the cluster
// being walked.
func (p *fileParser) refuse(field string) {
	l := p.cur
	if l == nil {
		return
	}
	var rel string
	switch {
	case field == l.prefix:
	case strings.HasPrefix(field, l.prefix+"."):
		rel = field[len(l.prefix)+1:]
	default:
		return
	}
	if l.refused == nil {
		l.refused, l.around = map[string]bool{}, map[string]bool{}
	}
	l.refused[rel] = true
	for f := rel; f != ""; {
		f = fileFieldParent(f)
		l.around[f] = true
	}
}

func (p *fileParser) syntaxError(err error, data []byte) {
	fe := &FileError{Path: p.path, Err: fmt.Errorf("invalid YAML: %w", err)}
	// yaml/v3 reports syntax errors only as text: "yaml: line N: problem".
	rest, ok := strings.CutPrefix(err.Error(), "yaml: line ")
	num, problem, ok2 := strings.Cut(rest, ": ")
	line, convErr := strconv.Atoi(num)
	if ok && ok2 && convErr == nil {
		fe.Line = line
		// yaml/v3 numbers parser errors (unlike scanner errors) from zero;
		// see parser.fail in its decode.go.
		if fileYAMLParserProblem(problem) {
			fe.Line++
		}
		// A file that ends without a newline ends, for yaml/v3, on the
		// line after its last; a problem found there (a mapping or list
		// left open) is at the end of the last line.
		fe.Line = min(fe.Line, p.lines)
		fe.Err = fmt.Errorf("invalid YAML: %s", problem)
	}
	p.add(fe)
}

func (p *fileParser) parse(data []byte) (model.State, []fileClusterLocs) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "", "", "the file is empty; want a top-level \"clusters\" list")
		} else {
			p.syntaxError(err, data)
		}
		return model.State{}, nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "", "", "a second YAML document starts here; the file must hold exactly one")
		return model.State{}, nil
	} else if !errors.Is(err, io.EOF) {
		p.syntaxError(err, data)
		return model.State{}, nil
	}
	if len(doc.Content) == 0 {
		p.errorf(nil, "", "", "the file is empty; want a top-level \"clusters\" list")
		return model.State{}, nil
	}
	// Aliases are expanded by the walk below, so they are counted first:
	// a small file of nested aliases would otherwise cost the walk (and
	// its errors) exponentially many nodes.
	if !p.checkAliases(doc.Content[0]) {
		return model.State{}, nil
	}
	root := fileResolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "", "the top level must be a mapping with a \"clusters\" list, not %s", fileDescribe(root))
		return model.State{}, nil
	}

	var state model.State
	var locs []fileClusterLocs
	sawClusters := false
	p.mapping(root, "", "", []string{"clusters"}, func(key string, k, v *yaml.Node) {
		sawClusters = true
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, "clusters", "", "want a list of clusters, got %s", fileDescribe(v))
			return
		}
		for i, cn := range v.Content {
			c, l := p.cluster(i, fileResolve(cn))
			state.Clusters = append(state.Clusters, c)
			locs = append(locs, l)
		}
	})
	if !sawClusters && p.found == 0 {
		p.errorf(root, "clusters", "", "missing; want a top-level \"clusters\" list")
	}
	return state, locs
}

// The fields each mapping accepts, in documentation order (the order the
// unknown-field error lists them in).
func fileClusterFields() []string {
	return []string{"name", "lb_policy", "hash_header", "minimum_ring_size", "maximum_ring_size", "table_size", "fade_in", "readers", "endpoints"}
}

func fileFadeInFields() []string { return []string{"duration", "exponent", "capacity"} }

func fileEndpointFields() []string {
	return []string{"address", "port", "weight", "scheme", "zone", "hash_key"}
}

func (p *fileParser) cluster(i int, n *yaml.Node) (model.Cluster, fileClusterLocs) {
	prefix := fmt.Sprintf("clusters[%d]", i)
	locs := fileClusterLocs{index: i, prefix: prefix, node: n, nodes: map[string]*yaml.Node{}}
	p.cur = &locs
	defer func() { p.cur = nil }()
	var c model.Cluster
	if n.Kind != yaml.MappingNode {
		p.errorf(n, prefix, "", "want a cluster mapping, got %s", fileDescribe(n))
		return c, locs
	}
	// The name is read first so that errors on fields written before it can
	// still say which cluster they are in.
	name := ""
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == "name" {
			if v := fileResolve(n.Content[j+1]); v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
				name = v.Value
			}
		}
	}
	p.mapping(n, prefix, name, fileClusterFields(), func(key string, k, v *yaml.Node) {
		field := prefix + "." + key
		locs.nodes[key] = v
		switch key {
		case "name":
			c.Name, _ = p.str(v, field, name, false)
		case "lb_policy":
			if s, ok := p.str(v, field, name, false); ok {
				pol, err := model.ParsePolicy(s)
				if err != nil {
					p.errorf(v, field, name, "%w", err)
				}
				c.Policy = pol
			}
		case "hash_header":
			c.HashHeader, _ = p.str(v, field, name, false)
		case "minimum_ring_size":
			c.MinRingSize, _ = p.positive(v, field, name, math.MaxUint64)
		case "maximum_ring_size":
			c.MaxRingSize, _ = p.positive(v, field, name, math.MaxUint64)
		case "table_size":
			c.TableSize, _ = p.positive(v, field, name, math.MaxUint64)
		case "fade_in":
			c.FadeIn = p.fadeIn(v, field, name, &locs)
		case "readers":
			c.Readers = p.strings(v, field, name)
		case "endpoints":
			if v.Kind != yaml.SequenceNode {
				p.errorf(v, field, name, "want a list of endpoints, got %s", fileDescribe(v))
				return
			}
			c.Endpoints = make([]model.Endpoint, 0, len(v.Content))
			for j, en := range v.Content {
				en = fileResolve(en)
				rel := fmt.Sprintf("endpoints[%d]", j)
				locs.nodes[rel] = en
				c.Endpoints = append(c.Endpoints, p.endpoint(en, prefix+"."+rel, rel, name, &locs))
			}
		}
	})
	return c, locs
}

// strings reads a list of strings.
func (p *fileParser) strings(v *yaml.Node, field, cluster string) []string {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, field, cluster, "want a list of strings, got %s", fileDescribe(v))
		return nil
	}
	out := make([]string, 0, len(v.Content))
	for j, e := range v.Content {
		if s, ok := p.str(fileResolve(e), fmt.Sprintf("%s[%d]", field, j), cluster, false); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *fileParser) fadeIn(n *yaml.Node, field, cluster string, locs *fileClusterLocs) *model.FadeIn {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, cluster, "want a mapping such as {duration: 30s, exponent: 2.5}, got %s", fileDescribe(n))
		return nil
	}
	f := &model.FadeIn{}
	p.mapping(n, field, cluster, fileFadeInFields(), func(key string, k, v *yaml.Node) {
		locs.nodes["fade_in."+key] = v
		switch key {
		case "duration":
			f.Duration, _ = p.duration(v, field+"."+key, cluster)
		case "exponent":
			f.Exponent, _ = p.float(v, field+"."+key, cluster)
		case "capacity":
			f.Capacity, _ = p.positive(v, field+"."+key, cluster, math.MaxUint64)
		}
	})
	return f
}

func (p *fileParser) endpoint(n *yaml.Node, field, rel, cluster string, locs *fileClusterLocs) model.Endpoint {
	var ep model.Endpoint
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, cluster, "want an endpoint mapping such as {address: 10.0.0.1, port: 8080}, got %s", fileDescribe(n))
		return ep
	}
	p.mapping(n, field, cluster, fileEndpointFields(), func(key string, k, v *yaml.Node) {
		locs.nodes[rel+"."+key] = v
		f := field + "." + key
		switch key {
		case "address":
			ep.Address, _ = p.str(v, f, cluster, false)
		case "port":
			port, _ := p.positive(v, f, cluster, math.MaxUint32)
			ep.Port = uint32(port)
		case "weight":
			w, _ := p.positive(v, f, cluster, math.MaxUint32)
			ep.Weight = uint32(w)
		case "scheme":
			ep.Scheme, _ = p.str(v, f, cluster, false)
		case "zone":
			ep.Zone, _ = p.str(v, f, cluster, true)
		case "hash_key":
			ep.HashKey, _ = p.str(v, f, cluster, true)
		}
	})
	return ep
}

// mapping calls fn for each key of n in file order, after rejecting keys
// that are unknown (a typo must never be silently ignored), repeated, or not
// strings. A null value is treated as an omitted field, as YAML users expect
// of "key:" with nothing after it.
func (p *fileParser) mapping(n *yaml.Node, prefix, cluster string, known []string, fn func(key string, k, v *yaml.Node)) {
	seen := map[string]*yaml.Node{}
	// meant holds the fields that unknown ones were likely meant as.
	var meant []string
	defer func() {
		// A field meant but not given is missing for the model only
		// because of the typo, which was reported: not again as missing.
		for _, f := range meant {
			if seen[f] == nil {
				p.refuse(fileJoinField(prefix, f))
			}
		}
	}()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], fileResolve(n.Content[i+1])
		field := fileJoinField(prefix, k.Value)
		if k.Kind != yaml.ScalarNode {
			p.report(k, prefix, cluster, "a field name must be a plain string, not %s", fileDescribe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			p.report(k, prefix, cluster, "YAML merge keys (<<) are not supported; write the fields out")
			continue
		}
		if !slices.Contains(known, k.Value) {
			msg := fmt.Sprintf("unknown field %q", k.Value)
			if s := fileSuggest(k.Value, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
				meant = append(meant, s)
			} else {
				msg += fmt.Sprintf(" (known fields: %s)", strings.Join(known, ", "))
			}
			p.report(k, field, cluster, "%s", msg)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.report(k, field, cluster, "given twice (first on line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			continue
		}
		fn(k.Value, k, v)
	}
}

// fileJoinField is the path of field key in the mapping at prefix.
func fileJoinField(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func (p *fileParser) str(v *yaml.Node, field, cluster string, allowEmpty bool) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		p.errorf(v, field, cluster, "want a string, got %s", fileDescribe(v))
		return "", false
	}
	if v.ShortTag() != "!!str" {
		p.errorf(v, field, cluster, "want a string, got %s; quote it if it is meant as text", fileDescribe(v))
		return "", false
	}
	if v.Value == "" && !allowEmpty {
		p.errorf(v, field, cluster, "must not be empty; omit the field to use the default")
		return "", false
	}
	return v.Value, true
}

// positive reads an integer in 1..limit. Zero is refused because the model
// reads zero as "unset" and would silently replace it with a default.
func (p *fileParser) positive(v *yaml.Node, field, cluster string, limit uint64) (uint64, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		p.errorf(v, field, cluster, "want a positive integer, got %s", fileDescribe(v))
		return 0, false
	}
	i, ok := fileSmallDecimal(v.Value)
	if !ok {
		if err := v.Decode(&i); err != nil {
			var u uint64
			if err := v.Decode(&u); err != nil || u > limit {
				p.errorf(v, field, cluster, "%s is too large (at most %d)", v.Value, limit)
				return 0, false
			}
			return u, true
		}
	}
	switch {
	case i < 0:
		p.errorf(v, field, cluster, "%d is negative; want a positive integer", i)
		return 0, false
	case i == 0:
		p.errorf(v, field, cluster, "must be at least 1; omit the field to use the default")
		return 0, false
	case uint64(i) > limit:
		p.errorf(v, field, cluster, "%d is too large (at most %d)", i, limit)
		return 0, false
	}
	return uint64(i), true
}

// fileSmallDecimal reads the integers files are made of (ports, weights,
// sizes) without yaml.Node.Decode, which sets up a decoder for each
// value: plain decimals with no sign, leading zero or underscore, short
// enough not to overflow. Anything else, which YAML may read otherwise
// (0123 is octal, 1_000 is 1000), is left to Decode.
func fileSmallDecimal(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func (p *fileParser) float(v *yaml.Node, field, cluster string) (float64, bool) {
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") {
		p.errorf(v, field, cluster, "want a number, got %s", fileDescribe(v))
		return 0, false
	}
	var f float64
	if err := v.Decode(&f); err != nil {
		p.errorf(v, field, cluster, "%q is not a number", v.Value)
		return 0, false
	}
	if !(f > 0) {
		p.errorf(v, field, cluster, "%v must be positive", f)
		return 0, false
	}
	return f, true
}

func (p *fileParser) duration(v *yaml.Node, field, cluster string) (time.Duration, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		p.errorf(v, field, cluster, "want a duration such as 30s or 1m30s, got %s", fileDescribe(v))
		return 0, false
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		p.errorf(v, field, cluster, "%q is not a duration (want e.g. 30s or 1m30s)", v.Value)
		return 0, false
	}
	if d <= 0 {
		p.errorf(v, field, cluster, "%s must be positive; omit fade_in for no fade", v.Value)
		return 0, false
	}
	return d, true
}

// validate applies the model's defaults and checks to each cluster, leaving
// out what the parse refused, and maps every model.FieldError back to the
// node it came from.
func (p *fileParser) validate(s *model.State, locs []fileClusterLocs) {
	names := map[string]*yaml.Node{}
	for i := range s.Clusters {
		c, l := &s.Clusters[i], &locs[i]
		if l.refused[""] {
			// Not a mapping: there is nothing of it to check.
			continue
		}
		p.check(c, l)
		if c.Name == "" {
			continue
		}
		at := l.lookup("name")
		if first, dup := names[c.Name]; dup {
			p.errorf(at, l.prefix+".name", c.Name, "cluster name %q is already used on line %d", c.Name, first.Line)
			continue
		}
		names[c.Name] = at
	}
}

// check applies the model's defaults and checks to one cluster, as parsed
// with locations l.
func (p *fileParser) check(c *model.Cluster, l *fileClusterLocs) {
	// The addresses as written, before ApplyDefaults canonicalises
	// them, so that errors quote what the file says.
	written := make([]string, len(c.Endpoints))
	for j, ep := range c.Endpoints {
		written[j] = ep.Address
	}
	c.ApplyDefaults()
	apart := l.apart()
	reported := p.addresses(c, written, l, apart)
	var isApart func(int) bool
	if apart != nil {
		isApart = func(i int) bool { return apart[i] }
	}
	for _, e := range fileLeafErrors(c.ValidateApart(isApart)) {
		var fe *model.FieldError
		if !errors.As(e, &fe) {
			p.errorf(l.node, l.prefix, c.Name, "%w", e)
			continue
		}
		if reported[fe.Field] || l.hides(fe.Field) {
			// addresses said it already, in the file's terms, or the
			// parse did.
			continue
		}
		p.errorf(l.lookup(fe.Field), l.prefix+"."+fe.Field, c.Name, "%w", fe.Err)
	}
}

// addresses checks the endpoint addresses of c, canonicalised by
// ApplyDefaults, against written, their spelling in the file. It reports
// what the model's checks would only call "not an IPv4 or IPv6 address" or
// "duplicates", with the reason and both lines, and returns the model field
// paths it reported so that the model's version is not repeated.
//
// One address has one spelling once published (Go's netip form, which is
// also inet_ntop's, the text Envoy hashes and prints): fd00::1 and
// FD00:0:0::0001 are one endpoint, so listing both is a duplicate. An
// IPv4-mapped address (::ffff:10.0.0.1) is refused rather than rewritten:
// it reaches the same pod as 10.0.0.1 under another ring key, so the file
// must say which is meant. The endpoints in apart are not compared.
func (p *fileParser) addresses(c *model.Cluster, written []string, l *fileClusterLocs, apart map[int]bool) map[string]bool {
	prefix := l.prefix
	reported := map[string]bool{}
	type hostPort struct {
		addr netip.Addr
		port uint32
	}
	// The first endpoint with each address and port, by index. The paths
	// and lines are built only for errors: every reload of a large file
	// runs this for every endpoint.
	seen := make(map[hostPort]int, len(c.Endpoints))
	addressError := func(j int, format string, args ...any) {
		field := fmt.Sprintf("endpoints[%d].address", j)
		p.errorf(l.lookup(field), prefix+"."+field, c.Name, format, args...)
		reported[field] = true
	}
	for j, ep := range c.Endpoints {
		addr, err := netip.ParseAddr(ep.Address)
		if err != nil {
			if msg := fileAddressProblem(written[j]); msg != "" {
				addressError(j, "%s", msg)
			}
			continue
		}
		switch {
		case addr.Zone() != "":
			addressError(j, "%q has an IPv6 zone (%%%s), which names a network interface of one host; the address is published to data planes on other hosts: write it without the zone", written[j], addr.Zone())
			continue
		case addr.Is4In6():
			addressError(j, "%q is an IPv4-mapped IPv6 address: write it as %s, since the two spellings reach one pod under two different ring keys", written[j], addr.Unmap())
			continue
		}
		if apart[j] {
			continue
		}
		key := hostPort{addr, ep.Port}
		i, dup := seen[key]
		if !dup {
			seen[key] = j
			continue
		}
		rel := fmt.Sprintf("endpoints[%d]", j)
		line := l.lookup(fmt.Sprintf("endpoints[%d]", i)).Line
		if written[i] == written[j] {
			p.errorf(l.lookup(rel), prefix+"."+rel, c.Name, "duplicates endpoints[%d] (%s) on line %d", i, ep.HostPort(), line)
		} else {
			p.errorf(l.lookup(rel), prefix+"."+rel, c.Name, "duplicates endpoints[%d] (%s) on line %d: %q here and %q there are one address, published as %s",
				i, ep.HostPort(), line, written[j], written[i], ep.Address)
		}
		reported[rel] = true
	}
	return reported
}

// fileAddressProblem explains why an address that is not an IP address is
// refused, for the mistakes worth a hint; "" leaves the model's message.
func fileAddressProblem(a string) string {
	if host, port, err := net.SplitHostPort(a); err == nil {
		if _, err := netip.ParseAddr(host); err == nil {
			return fmt.Sprintf("%q includes a port: write the address %s here and %s in port", a, host, port)
		}
	}
	if fileDNSName(a) {
		return fmt.Sprintf("%q is a DNS name, and endpoints take IP addresses only: EDS carries resolved addresses, Envoy refuses a name in an EDS cluster, and each data plane would resolve and hash it its own way; list the addresses it resolves to", a)
	}
	return ""
}

// fileDNSName reports whether a looks like a host name: dot-separated
// labels of letters, digits and hyphens, at least one letter.
func fileDNSName(a string) bool {
	letter := false
	for _, label := range strings.Split(strings.TrimSuffix(a, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
				letter = true
			case r >= '0' && r <= '9', r == '-':
			default:
				return false
			}
		}
	}
	return letter
}

// lookup finds the node for a model field path, falling back to the nearest
// enclosing node the file does have: a field that was omitted is reported
// at its parent.
func (l *fileClusterLocs) lookup(path string) *yaml.Node {
	for path != "" {
		if n, ok := l.nodes[path]; ok {
			return n
		}
		cut := max(strings.LastIndexByte(path, '.'), strings.LastIndexByte(path, '['))
		if cut < 0 {
			break
		}
		path = path[:cut]
	}
	return l.node
}

func fileLeafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, fileLeafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// fileResolve follows aliases (*name) to the anchored node, so anchors work
// as YAML users expect. It is safe only on a document checkAliases has
// passed: an alias can name a node that contains it, and nested aliases
// can make a small file describe an exponential number of nodes.
func fileResolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func fileDescribe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return fmt.Sprintf("%s %s", strings.TrimPrefix(n.ShortTag(), "!!"), n.Value)
	}
	return "an unsupported YAML node"
}

// fileSuggest returns the known field closest to a misspelt one, when it is
// close enough to be a plausible typo.
func fileSuggest(got string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := suggest.Distance(got, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}
