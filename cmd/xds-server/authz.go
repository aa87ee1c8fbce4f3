package main

import (
	"errors"
	"flag"
	"fmt"

	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/authz"
)

// Values of --authz.
const (
	authzOff       = "off"
	authzNamespace = "namespace"
)

// addAuthzFlags declares the flags deciding which clients read which
// clusters; docs/xds.md, "Authorization".
func addAuthzFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.authz, "authz", authzOff, "which clusters an xDS client may read: off (every cluster, to every client that connects) or namespace (needs --tls-client-ca: its certificate's namespace's clusters, those whose readers list it, or all if --authz-cluster-readers names it; clients without a certificate read nothing)")
	fs.Func("authz-cluster-readers", "comma-separated clients that read every cluster under --authz=namespace: SPIFFE IDs (spiffe://...), DNS names or namespaces", func(v string) error {
		c.authzClusterReaders = append(c.authzClusterReaders, authz.SplitList(v)...)
		return nil
	})
}

// authzPolicy checks the authz flags and builds the policy; nil means off.
func authzPolicy(c config) (*authz.Policy, error) {
	switch c.authz {
	case authzOff:
		if len(c.authzClusterReaders) > 0 {
			return nil, errors.New("--authz-cluster-readers needs --authz=namespace")
		}
		return nil, nil
	case authzNamespace:
		if c.tlsClientCA == "" {
			return nil, errors.New("--authz=namespace needs --tls-client-ca: without client certificates every client is anonymous and would read nothing")
		}
		p, err := authz.NewPolicy(c.authzClusterReaders)
		if err != nil {
			return nil, fmt.Errorf("--authz-cluster-readers: %w", err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("--authz %q: want off or namespace", c.authz)
}

// logAuthz says at start-up who reads what.
func logAuthz(log *zap.Logger, c config) {
	switch {
	case c.authz == authzNamespace:
		log.Info("xDS clients read the clusters of their certificate's namespace, those that list them as readers, and all clusters if cluster-wide readers",
			zap.Strings("cluster_readers", c.authzClusterReaders))
	case c.tlsClientCA != "":
		log.Info("every xDS client with a certificate --tls-client-ca signed reads every cluster; --authz=namespace limits each to its own")
	}
}
