// Package watch holds the endpoint sources: the Kubernetes EndpointSlice and
// Service informer, and the YAML file source. Each turns its input into a
// model.State and publishes it; none knows about xDS.
//
// A source never publishes a state it could not fully validate. When input
// goes bad it keeps the last good state, reports the problem through
// Problems, its log and its metrics, and publishes again once the input is
// fixed.
package watch
