// Package deploy holds the Kubernetes manifests (kustomize base and an
// example overlay) that run ringxds in a cluster. The Go package exists only
// for tests: one renders the overlay and has a real API server validate it,
// one checks the admission policy refuses exactly the annotations ringxds
// would not serve.
package deploy
