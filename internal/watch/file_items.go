package watch

import (
	"bytes"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/internal/model"
)

// fileItems parses successive versions of one endpoints file, reusing for
// each cluster whose text did not change the cluster it parsed last time.
// A change to one cluster of a 10,000-endpoint file then costs the parse of
// that cluster, not of the whole file (BenchmarkFileReload).
//
// It gives exactly what ParseFile gives, state and errors alike, by
// reusing only where that is certain and parsing in full otherwise: the
// file must have the layout docs/file-source.md shows (fileSplitItems),
// and every cluster must be valid. Anything else, including every file
// with a problem, is parsed by ParseFile, so that errors come from one
// place with their lines and fields. FuzzParseFileItems compares the two.
type fileItems struct {
	mu sync.Mutex
	// last holds the clusters of the last file parsed item by item, by
	// the text of their item; nil before one was.
	last map[string]*fileItem
}

// fileItem is one item of the clusters list: its text, and the cluster it
// parses to, defaults applied and checked. It is never changed once made,
// as parse hands out clones.
type fileItem struct {
	text    string
	cluster model.Cluster
}

// parse returns ParseFile(path, data), reusing what it can of the last
// file parsed.
func (f *fileItems) parse(path string, data []byte) (model.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, next, ok := fileParseItems(data, f.last)
	if !ok {
		return ParseFile(path, data)
	}
	f.last = next
	return st, nil
}

// fileParseItems parses data item by item, taking the clusters of items
// found in last from there. It returns the state, normalized as ParseFile
// returns it, and the items of data; ok is false when data does not have
// the plain layout or any cluster is invalid or named twice, and
// ParseFile must say why.
func fileParseItems(data []byte, last map[string]*fileItem) (st model.State, items map[string]*fileItem, ok bool) {
	texts, ok := fileSplitItems(data)
	if !ok {
		return model.State{}, nil, false
	}
	items = make(map[string]*fileItem, len(texts))
	st.Clusters = make([]model.Cluster, 0, len(texts))
	for _, text := range texts {
		// Indexing with string(text) does not copy the text.
		it, found := last[string(text)]
		if !found {
			c, ok := fileParseItem(text)
			if !ok {
				return model.State{}, nil, false
			}
			it = &fileItem{text: string(text), cluster: c}
		}
		if _, dup := items[it.text]; dup {
			// Two identical items name one cluster twice.
			return model.State{}, nil, false
		}
		items[it.text] = it
		// The state is the caller's to change (FileSource sets FirstSeen
		// in it) and to hand on, so it shares nothing with the items.
		st.Clusters = append(st.Clusters, it.cluster.Clone())
	}
	slices.SortFunc(st.Clusters, func(a, b model.Cluster) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(st.Clusters); i++ {
		if st.Clusters[i].Name == st.Clusters[i-1].Name {
			return model.State{}, nil, false
		}
	}
	return st, items, true
}

// fileParseItem parses the text of one item of the clusters list on its
// own, as a document holding a list of that one item, at the indentation
// it has in the file. ok is false if the item is not one valid cluster, or
// uses what could read differently within the whole file (see
// filePlainNodes).
func fileParseItem(text []byte) (model.Cluster, bool) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(text)).Decode(&doc); err != nil || len(doc.Content) != 1 {
		return model.Cluster{}, false
	}
	list := doc.Content[0]
	if list.Kind != yaml.SequenceNode || len(list.Content) != 1 || !filePlainNodes(list) {
		return model.Cluster{}, false
	}
	p := &fileParser{}
	c, locs := p.cluster(0, list.Content[0])
	if p.found == 0 {
		p.check(&c, &locs)
	}
	if p.found > 0 {
		return model.Cluster{}, false
	}
	return c, true
}

// filePlainNodes reports whether the tree under n holds no anchor, alias
// or block scalar. An anchor may be named from another item, and the
// whole file's alias budget is the whole file's; a block scalar's trailing
// lines are the one thing whose reading might depend on what follows the
// item. Endpoints files have no use for either, and ParseFile reads them.
func filePlainNodes(n *yaml.Node) bool {
	if n.Anchor != "" || n.Kind == yaml.AliasNode || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return false
	}
	for _, c := range n.Content {
		if !filePlainNodes(c) {
			return false
		}
	}
	return true
}

// fileSplitItems cuts data into the texts of the items of its clusters
// list, each from the line of its "- " to the next one's, when data has
// the block layout docs/file-source.md shows:
//
//	# comments and blank lines
//	clusters:          # a comment
//	  - name: a        # every item's "- " at one indentation
//	    endpoints: ... # the rest of the item indented further
//	# comments and blank lines anywhere
//	  - name: b
//
// ok is false for anything else (flow style or JSON, another top-level
// key, a document marker or directive, an anchor or tag on the list, a
// line indented less than the items that is not a comment), which
// ParseFile reads.
//
// Within that layout an item's text reads on its own as it reads in the
// file. A line that starts with the items' "- " ends every block node of
// the item before it, as the line is indented no further than they are;
// and if the line is instead inside a quoted scalar or a flow collection
// of the item before, that item's text leaves it open and does not parse
// alone.
func fileSplitItems(data []byte) (items [][]byte, ok bool) {
	rest, ok := fileSkipHeader(data)
	if !ok {
		return nil, false
	}
	indent, start := -1, -1
	for off := len(data) - len(rest); off < len(data); {
		end := len(data)
		if nl := bytes.IndexByte(data[off:], '\n'); nl >= 0 {
			end = off + nl + 1
		}
		line := data[off:end]
		n := fileLeadingSpaces(line)
		if !fileBlankOrComment(line[n:]) {
			switch {
			case indent < 0 && fileListEntry(line[n:]):
				indent, start = n, off
			case n == indent && fileListEntry(line[n:]):
				items = append(items, data[start:off])
				start = off
			case indent < 0 || n <= indent:
				return nil, false
			}
		}
		off = end
	}
	if start < 0 {
		// "clusters:" and nothing else: a null, which ParseFile refuses.
		return nil, false
	}
	return append(items, data[start:]), true
}

// fileSkipHeader returns what follows the "clusters:" line of data, when
// only comments and blank lines come before it.
func fileSkipHeader(data []byte) (rest []byte, ok bool) {
	for len(data) > 0 {
		line := data
		rest = nil
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, rest = data[:nl+1], data[nl+1:]
		}
		if after, found := bytes.CutPrefix(line, []byte("clusters:")); found {
			return rest, fileBlankOrComment(after[fileLeadingSpaces(after):]) && (len(after) == 0 || after[0] != '#')
		}
		if !fileBlankOrComment(line[fileLeadingSpaces(line):]) {
			return nil, false
		}
		data = rest
	}
	return nil, false
}

func fileLeadingSpaces(line []byte) int {
	n := 0
	for n < len(line) && line[n] == ' ' {
		n++
	}
	return n
}

// fileBlankOrComment reports whether s, the rest of a line after its
// leading spaces, is empty or a comment.
func fileBlankOrComment(s []byte) bool {
	return len(s) == 0 || s[0] == '#' || s[0] == '\n' || s[0] == '\r' && (len(s) == 1 || s[1] == '\n')
}

// fileListEntry reports whether s, the rest of a line after its leading
// spaces, starts a block list entry: "-" then a space or the line's end.
func fileListEntry(s []byte) bool {
	return len(s) > 0 && s[0] == '-' && (len(s) == 1 || s[1] == ' ' || s[1] == '\n')
}
