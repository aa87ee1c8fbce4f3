package server

import (
	"fmt"
	"regexp"
	"strings"

	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// maxRegexBytes bounds a CSDS node_id regex: Go's regexp runs in linear
// time, but compiling it costs with its length, and it comes from the
// caller.
const maxRegexBytes = 1024

// compileNodeMatchers turns a CSDS request's node_matchers into one test
// on node IDs: a node matches if any matcher does (OR), and no matcher
// means every node. Matching on node metadata is refused: the registry
// keeps only the metadata that decides a client's kind (slimNode), so such
// a matcher would silently match less than it says.
func compileNodeMatchers(ms []*matcher.NodeMatcher) (func(nodeID string) bool, error) {
	if len(ms) == 0 {
		return func(string) bool { return true }, nil
	}
	tests := make([]func(string) bool, 0, len(ms))
	for i, m := range ms {
		if len(m.GetNodeMetadatas()) > 0 {
			return nil, errUnsupportedMatcher(fmt.Sprintf("node_matchers[%d].node_metadatas", i))
		}
		if m.GetNodeId() == nil {
			return func(string) bool { return true }, nil
		}
		t, err := compileStringMatcher(m.GetNodeId(), fmt.Sprintf("node_matchers[%d].node_id", i))
		if err != nil {
			return nil, err
		}
		tests = append(tests, t)
	}
	return func(id string) bool {
		for _, t := range tests {
			if t(id) {
				return true
			}
		}
		return false
	}, nil
}

// compileStringMatcher implements envoy.type.matcher.v3.StringMatcher as
// Envoy does, custom matchers aside.
func compileStringMatcher(m *matcher.StringMatcher, field string) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if m.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(s string) bool { return fold(s) == want }, nil
	case *matcher.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(s string) bool { return strings.HasPrefix(fold(s), want) }, nil
	case *matcher.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(s string) bool { return strings.HasSuffix(fold(s), want) }, nil
	case *matcher.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(s string) bool { return strings.Contains(fold(s), want) }, nil
	case *matcher.StringMatcher_SafeRegex:
		expr := p.SafeRegex.GetRegex()
		if len(expr) > maxRegexBytes {
			return nil, fmt.Errorf("%s.safe_regex: %d bytes (limit %d)", field, len(expr), maxRegexBytes)
		}
		// Envoy's safe_regex matches the whole string (RE2 full match);
		// ignore_case does not apply to it. The expression is compiled on
		// its own first: wrapped at once, "a)|(b" would close the wrapper's
		// group and turn the full match into a substring match.
		if _, err := regexp.Compile(expr); err != nil {
			return nil, fmt.Errorf("%s.safe_regex: %w", field, err)
		}
		re, err := regexp.Compile(`^(?:` + expr + `)$`)
		if err != nil {
			return nil, fmt.Errorf("%s.safe_regex: %w", field, err)
		}
		return re.MatchString, nil
	case *matcher.StringMatcher_Custom:
		return nil, errUnsupportedMatcher(field + ".custom")
	}
	return nil, fmt.Errorf("%s: no match pattern (want exact, prefix, suffix, contains or safe_regex)", field)
}

// errUnsupportedMatcher names what CSDS cannot match on.
func errUnsupportedMatcher(what string) error {
	return fmt.Errorf("node_matchers: %s is not supported (ringxds matches node_id with exact, prefix, suffix, contains or safe_regex)", what)
}
