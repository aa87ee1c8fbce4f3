// Package deploy holds the Kubernetes manifests that run ringxds in a
// cluster: the kustomize base, components and overlays, and the Helm chart
// in helm/ringxds. The Go package exists only for tests: one renders the
// overlays and has a real API server validate them, one renders the chart
// for several value sets, has the API server validate it, and holds its
// default render equal to the base's, and one checks the admission policy
// refuses exactly the annotations ringxds would not serve.
package deploy
