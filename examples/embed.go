// Package examples holds the example endpoints file, embedded so that
// xds-server has a working default configuration without any file on disk.
package examples

import _ "embed"

// DefaultEndpoints is the content of examples/endpoints.yaml: one cluster per
// load-balancing policy, each with three backends on 127.0.0.1.
//
//go:embed endpoints.yaml
var DefaultEndpoints []byte

// DefaultEndpointsName names DefaultEndpoints in errors and logs, as if it
// had been read from the repository path.
const DefaultEndpointsName = "examples/endpoints.yaml"
