// Package deploy holds the Kubernetes manifests (kustomize base and an
// example overlay) that run ringxds in a cluster. The Go package exists only
// for the test that renders the overlay and has a real API server validate it.
package deploy
