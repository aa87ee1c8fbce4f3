// Package model holds the data-plane-neutral description of what ringxds
// serves: clusters, their hashing policy and their endpoints.
//
// Every endpoint source (internal/watch) produces a State; the snapshot
// builder (internal/snapshot) turns a State into xDS resources. Nothing in
// this package knows about xDS, Kubernetes or files, so the data flow stays
// one-way: source -> model -> snapshot -> caches -> streams.
package model
