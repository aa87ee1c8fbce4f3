// Package kubetest runs a real etcd and kube-apiserver on 127.0.0.1 for
// integration tests, from the binaries hack/testbin.sh provides. Nothing
// else of Kubernetes runs: no controllers, so tests create EndpointSlices
// themselves and use a fresh namespace each.
package kubetest
