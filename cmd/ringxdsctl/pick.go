package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/ringhash"
)

const pickSynopsis = `pick [--file endpoints.yaml] [--cluster name] --key key [--key key...] [-o json]

Answers, offline, where each key goes on every data plane whose ring the
published resources fix (as /debug/pick's by_client does on a running
server), once every endpoint of the file is established. Without --file it
reads the example xds-server serves by default; without --cluster, every
cluster.`

// pickAnswer is one key of one cluster, shaped like /debug/pick's answer.
type pickAnswer struct {
	Cluster string `json:"cluster"`
	Key     string `json:"key"`
	// Hash is the request hash as a decimal string, as /debug/pick gives
	// it: JSON numbers lose precision above 2^53.
	Hash     string            `json:"hash"`
	Policy   map[string]string `json:"policy"`
	ByClient map[string]string `json:"by_client"`
}

type pickOutput struct {
	File  string       `json:"file"`
	Picks []pickAnswer `json:"picks"`
	// Unpredicted names the implementations with no answer, and why.
	Unpredicted map[string]string `json:"unpredicted"`
}

func runPick(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pick", pickSynopsis, stderr)
	file := fs.String("file", "", "endpoints file (default: the embedded examples/endpoints.yaml)")
	cluster := fs.String("cluster", "", "cluster to answer for (default: every cluster)")
	var keys []string
	fs.Func("key", "a request's hash key, the value of the cluster's hash header (repeatable)", func(v string) error {
		keys = append(keys, v)
		return nil
	})
	out := outputFlag(fs)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usageError{error: fmt.Errorf("unexpected arguments %q", rest)}
	case len(keys) == 0:
		return usageError{error: fmt.Errorf("--key is required")}
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	p, err := loadPlan(*file)
	if err != nil {
		return err
	}
	clusters := p.clusters()
	if *cluster != "" {
		if err := p.checkCluster(*cluster); err != nil {
			return err
		}
		clusters = []string{*cluster}
	}
	res := pickOutput{File: p.path, Unpredicted: dataplane.Unpredicted()}
	for _, c := range clusters {
		answers, err := pickCluster(p, c, keys)
		if err != nil {
			return err
		}
		res.Picks = append(res.Picks, answers...)
	}
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return pickTable(stdout, res)
}

// pickCluster answers keys on one cluster for every predicted data plane.
func pickCluster(p *plan, cluster string, keys []string) ([]pickAnswer, error) {
	out := make([]pickAnswer, len(keys))
	for i, k := range keys {
		out[i] = pickAnswer{Cluster: cluster, Key: k, Hash: strconv.FormatUint(ringhash.HashKey(k), 10),
			Policy: map[string]string{}, ByClient: map[string]string{}}
	}
	for _, impl := range dataplane.Predicted() {
		r, err := p.ring(impl, cluster)
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			out[i].Policy[impl.Name], out[i].ByClient[impl.Name] = r.Pick(ringhash.HashKey(k), p.at)
		}
	}
	return out, nil
}

func pickTable(w io.Writer, res pickOutput) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tKEY\tDATA PLANE\tPOLICY\tENDPOINT")
	for _, a := range res.Picks {
		for _, impl := range dataplane.Predicted() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Cluster, strconv.Quote(a.Key), impl.Name, a.Policy[impl.Name], a.ByClient[impl.Name])
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeUnpredicted(w, res.Unpredicted)
}

// writeUnpredicted names the implementations no answer covers.
func writeUnpredicted(w io.Writer, unpredicted map[string]string) error {
	names := make([]string, 0, len(unpredicted))
	for n := range unpredicted {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, err := fmt.Fprintf(w, "not predicted: %s: %s\n", n, unpredicted[n]); err != nil {
			return err
		}
	}
	return nil
}
