// Package docs holds ringxds' documentation. The Go package exists only
// for tests that keep the documentation true: the README's and these
// pages' Go snippets compile as pasted, their endpoints-file examples load,
// and their other YAML and JSON examples parse.
package docs
