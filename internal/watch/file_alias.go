package watch

import (
	"go.yaml.in/yaml/v3"
)

// FileAliasFloor is the number of nodes that aliases may always add to an
// endpoints file, whatever its size. A file may add through aliases the
// larger of FileAliasFloor and the number of nodes it writes out (every
// scalar, key, list and mapping is a node: {address: 10.0.0.1, port: 80}
// is five), so that the walk over the expanded file costs at most twice
// what the same bytes cost written out, plus a constant.
//
// 100,000 nodes are some 11,000 endpoints with three fields each, more
// than any hand-written file shares through anchors, and walking them
// costs tens of milliseconds (BenchmarkFileParseLarge). A "billion laughs"
// file of nested aliases, which would expand to millions of nodes and as
// many errors, is refused before the walk with one error.
const FileAliasFloor = 100_000

// checkAliases counts the nodes the parser would visit through aliases in
// the document whose top node is top, and reports false, with one error
// located at the offending alias, when they exceed the budget (see
// FileAliasFloor) or when an alias names a node that contains it. It costs
// one pass over the nodes as written, each anchored node's expanded size
// being computed once.
func (p *fileParser) checkAliases(top *yaml.Node) bool {
	written := fileCountNodes(top)
	c := fileAliasCounter{
		budget: max(FileAliasFloor, written),
		sizes:  map[*yaml.Node]int{},
		active: map[*yaml.Node]bool{},
	}
	bad, cycle := c.walk(top)
	switch {
	case bad == nil:
		return true
	case cycle:
		p.errorf(bad, "", "", "alias *%s names a node that contains it, so the content would never end; write that part out", bad.Value)
	default:
		p.errorf(bad, "", "", "alias *%s: aliases would add more than %d nodes to the %d written out in the file (they may add at most the larger of %d and the number written out); anchors nested to multiply content are refused: write the shared content out, or alias less of it",
			bad.Value, c.budget, written, FileAliasFloor)
	}
	return false
}

// fileCountNodes counts the nodes of the tree under n as written, each
// alias as one node. The stack bounds the work by the size of the tree.
func fileCountNodes(n *yaml.Node) int {
	count := 0
	stack := []*yaml.Node{n}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		count++
		if n.Kind != yaml.AliasNode {
			stack = append(stack, n.Content...)
		}
	}
	return count
}

// fileAliasCounter adds up, in document order, the expanded sizes of the
// nodes that aliases name.
type fileAliasCounter struct {
	// budget is the most nodes aliases may add.
	budget int
	// added is the nodes aliases have added so far, at most budget+1.
	added int
	// sizes memoizes the expanded size of each anchored node, at most
	// budget+1, so that an anchor named by many aliases is sized once.
	sizes map[*yaml.Node]int
	// active holds the anchored nodes being sized: meeting one again
	// means an alias names a node that contains it.
	active map[*yaml.Node]bool
}

// walk visits the nodes under n as written and returns the first alias
// that takes the count over the budget or closes a cycle, with cycle set in
// the second case; nil when the document is within budget.
func (c *fileAliasCounter) walk(n *yaml.Node) (bad *yaml.Node, cycle bool) {
	for _, ch := range n.Content {
		if ch.Kind != yaml.AliasNode {
			if bad, cycle := c.walk(ch); bad != nil {
				return bad, cycle
			}
			continue
		}
		size, ok := c.size(ch.Alias)
		if !ok {
			return ch, true
		}
		c.added = min(c.added+size, c.budget+1)
		if c.added > c.budget {
			return ch, false
		}
	}
	return nil, false
}

// size is the number of nodes under n with every alias expanded, at most
// budget+1; ok is false when an alias inside n names n or one of the
// anchored nodes being sized around it.
func (c *fileAliasCounter) size(n *yaml.Node) (size int, ok bool) {
	if n == nil {
		return 1, true
	}
	if s, done := c.sizes[n]; done {
		return s, true
	}
	if c.active[n] {
		return 0, false
	}
	if n.Anchor != "" {
		c.active[n] = true
		defer delete(c.active, n)
	}
	size = 1
	for _, ch := range n.Content {
		if ch.Kind == yaml.AliasNode {
			ch = ch.Alias
		}
		s, ok := c.size(ch)
		if !ok {
			return 0, false
		}
		// Saturating keeps the sum from overflowing: nested aliases grow
		// exponentially, and anything past the budget is refused anyway.
		size = min(size+s, c.budget+1)
	}
	if n.Anchor != "" {
		c.sizes[n] = size
	}
	return size, true
}
