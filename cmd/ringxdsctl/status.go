package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/server"
)

const statusSynopsis = `status --server host:port [--server host:port...] [--tls-ca ca.pem [--tls-cert c.pem --tls-key k.pem]] [-o json]

Reads CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) from each
xds-server given, on its xDS port, and lists each replica with its build,
then every client with the replica it is connected to and the state of what
it holds, per resource type: acked, nacked (with the client's error), or
requested (sent and not answered yet, or asked for and never sent). One
replica's /debug/clients shows only its own clients; this shows all of them.
Under --authz=namespace only --authz-cluster-readers may read CSDS.`

// statusFlags are the connection settings of status.
type statusFlags struct {
	servers                         []string
	tlsCA, tlsCert, tlsKey, tlsName string
	useTLS                          bool
	nodePrefix                      string
	timeout                         time.Duration
}

// replicaStatus is one server's answer.
type replicaStatus struct {
	Server  string            `json:"server"`
	Replica buildinfo.Replica `json:"replica"`
	Clients []clientStatus    `json:"clients"`
	// Error says why the server did not answer; the others are listed.
	Error string `json:"error,omitempty"`
}

// clientStatus is one client as CSDS lists it.
type clientStatus struct {
	Node      string `json:"node"`
	Cluster   string `json:"cluster,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
	// Kind is the client's ringxds.io/client node metadata, if it set one.
	Kind string `json:"kind,omitempty"`
	// Summary counts, per resource type (cds, eds, lds, rds), the
	// resources in each client status (ACKED, NACKED, REQUESTED).
	Summary   map[string]map[string]int `json:"summary"`
	Resources []resourceStatus          `json:"resources"`
}

// resourceStatus is one generic_xds_config.
type resourceStatus struct {
	Type         string `json:"type"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	ConfigStatus string `json:"config_status"`
	Version      string `json:"version,omitempty"`
	Error        string `json:"error,omitempty"`
}

type statusOutput struct {
	Replicas []replicaStatus `json:"replicas"`
	// Builds counts the distinct builds among the replicas that answered.
	Builds int `json:"builds"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", statusSynopsis, stderr)
	var f statusFlags
	fs.Func("server", "an xds-server's xDS address, host:port (repeatable: one per replica)", func(v string) error {
		f.servers = append(f.servers, v)
		return nil
	})
	fs.BoolVar(&f.useTLS, "tls", false, "connect over TLS, verifying the server against the system roots (implied by the other --tls flags)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA bundle to verify the servers' certificates with")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate, for servers that require mTLS")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tlsName, "tls-server-name", "", "name to verify the servers' certificates against (default: the host of --server)")
	fs.StringVar(&f.nodePrefix, "node", "", "list only the clients whose node ID starts with this")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for each server")
	out := outputFlag(fs)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usageError{error: fmt.Errorf("unexpected arguments %q (name servers with --server)", rest)}
	case len(f.servers) == 0:
		return usageError{error: errors.New("--server is required")}
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return usageError{error: errors.New("--tls-cert and --tls-key go together")}
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	creds, err := f.credentials()
	if err != nil {
		return err
	}
	res := statusOutput{}
	builds := map[buildinfo.Info]bool{}
	failed := 0
	for _, addr := range f.servers {
		rs := fetchStatus(ctx, addr, creds, f)
		if rs.Error != "" {
			failed++
		} else {
			builds[rs.Replica.Build] = true
		}
		res.Replicas = append(res.Replicas, rs)
	}
	res.Builds = len(builds)
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = statusTable(stdout, res)
	}
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d servers did not answer", failed, len(f.servers))
	}
	return err
}

// credentials are the transport credentials the flags ask for.
func (f statusFlags) credentials() (credentials.TransportCredentials, error) {
	if !f.useTLS && f.tlsCA == "" && f.tlsCert == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.tlsName}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.tlsCA)
		}
	}
	if f.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}

// maxStatusBytes is how large a CSDS answer status reads: without
// contents, about 100 bytes a resource, so a replica serving 1,000 clients
// of 300 resources each answers in some 30 MB.
const maxStatusBytes = 256 << 20

// fetchStatus asks one server for every client, without resource contents.
func fetchStatus(ctx context.Context, addr string, creds credentials.TransportCredentials, f statusFlags) replicaStatus {
	rs := replicaStatus{Server: addr, Clients: []clientStatus{}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		rs.Error = err.Error()
		return rs
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req := &statusv3.ClientStatusRequest{ExcludeResourceContents: true}
	if f.nodePrefix != "" {
		req.NodeMatchers = []*matcher.NodeMatcher{{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: f.nodePrefix}}}}
	}
	var header metadata.MD
	resp, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, req,
		grpc.Header(&header), grpc.MaxCallRecvMsgSize(maxStatusBytes))
	if err != nil {
		rs.Error = err.Error()
		return rs
	}
	first := func(k string) string {
		if v := header.Get(k); len(v) > 0 {
			return v[0]
		}
		return buildinfo.Unknown
	}
	rs.Replica = buildinfo.Replica{Name: first(server.CSDSReplicaHeader), Build: buildinfo.Info{
		Version: first(server.CSDSVersionHeader), Revision: first(server.CSDSRevisionHeader), GoVersion: first(server.CSDSGoVersionHeader)}}
	for _, c := range resp.GetConfig() {
		rs.Clients = append(rs.Clients, clientOf(c))
	}
	return rs
}

func clientOf(c *statusv3.ClientConfig) clientStatus {
	n := c.GetNode()
	cs := clientStatus{Node: n.GetId(), Cluster: n.GetCluster(),
		UserAgent: strings.TrimSpace(n.GetUserAgentName() + " " + n.GetUserAgentVersion()),
		Kind:      n.GetMetadata().GetFields()[dataplane.KindMetadataKey].GetStringValue(),
		Summary:   map[string]map[string]int{}, Resources: []resourceStatus{}}
	for _, g := range c.GetGenericXdsConfigs() {
		r := resourceStatus{Type: shortTypeName(g.GetTypeUrl()), Name: g.GetName(), Status: g.GetClientStatus().String(),
			ConfigStatus: g.GetConfigStatus().String(), Version: g.GetVersionInfo(), Error: g.GetErrorState().GetDetails()}
		cs.Resources = append(cs.Resources, r)
		if cs.Summary[r.Type] == nil {
			cs.Summary[r.Type] = map[string]int{}
		}
		cs.Summary[r.Type][r.Status]++
	}
	return cs
}

// shortTypeName is the name people use for a type URL: lds, rds, cds, eds.
func shortTypeName(typeURL string) string {
	for short, suffix := range map[string]string{"lds": ".Listener", "rds": ".RouteConfiguration", "cds": ".Cluster", "eds": ".ClusterLoadAssignment"} {
		if strings.HasSuffix(typeURL, suffix) {
			return short
		}
	}
	return typeURL
}

// statusTypes are the columns of the clients table, in dependency order.
var statusTypes = []string{"lds", "rds", "cds", "eds"}

func statusTable(w io.Writer, res statusOutput) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tSERVER\tBUILD\tCLIENTS")
	for _, rs := range res.Replicas {
		if rs.Error != "" {
			fmt.Fprintf(tw, "-\t%s\terror: %s\t-\n", rs.Server, rs.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", rs.Replica.Name, rs.Server, rs.Replica.Build, len(rs.Clients))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.Builds > 1 {
		fmt.Fprintf(w, "%d different builds serve these replicas\n", res.Builds)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "REPLICA\tNODE\tUSER AGENT\tLDS\tRDS\tCDS\tEDS")
	var nacks []string
	for _, rs := range res.Replicas {
		for _, c := range rs.Clients {
			cols := make([]string, 0, len(statusTypes))
			for _, t := range statusTypes {
				cols = append(cols, summarize(c.Summary[t]))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rs.Replica.Name, c.Node, cmp.Or(c.UserAgent, "-"), strings.Join(cols, "\t"))
			for _, r := range c.Resources {
				if r.Error != "" {
					nacks = append(nacks, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", rs.Replica.Name, c.Node, r.Type, r.Name, r.Version, r.Error))
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(nacks) > 0 {
		fmt.Fprintln(w, "\nNACKED (the client keeps its previous version)")
		fmt.Fprintln(tw, "REPLICA\tNODE\tTYPE\tNAME\tREJECTED VERSION\tERROR")
		for _, l := range nacks {
			fmt.Fprintln(tw, l)
		}
	}
	return tw.Flush()
}

// summarize is one type's counts: "3 acked, 1 nacked", "-" for none.
func summarize(counts map[string]int) string {
	if len(counts) == 0 {
		return "-"
	}
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, s)
	}
	order := []string{"ACKED", "NACKED", "REQUESTED"}
	slices.SortFunc(states, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		return cmp.Or(cmp.Compare(uint(ia), uint(ib)), cmp.Compare(a, b))
	})
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%d %s", counts[s], strings.ToLower(s))
	}
	return strings.Join(parts, ", ")
}
