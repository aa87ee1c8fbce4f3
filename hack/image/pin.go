package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// archiveDigest reads the digest of the one image in an archive that
// writeArchive wrote: the digest a registry gives it when the layout is
// pushed as it is (crane push, skopeo copy).
func archiveDigest(path string) (v1.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return v1.Hash{}, fmt.Errorf("%s: no index.json: not an OCI image layout archive", path)
		}
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return v1.Hash{}, fmt.Errorf("%s: index.json: %w", path, err)
		}
		if len(idx.Manifests) != 1 || !idx.Manifests[0].MediaType.IsImage() {
			return v1.Hash{}, fmt.Errorf("%s: index.json lists %d manifests, want one image", path, len(idx.Manifests))
		}
		return idx.Manifests[0].Digest, nil
	}
}

// kustomizeDigest is the digest line of an images entry in a
// kustomization.
var kustomizeDigest = regexp.MustCompile(`(?m)^(\s+digest:[ \t]*)("?)sha256:[0-9a-f]{64}("?)[ \t]*$`)

// pinDigest sets the one digest line of a kustomization (as kustomize edit
// set image would, keeping the comments) to digest.
func pinDigest(kustomization []byte, digest v1.Hash) ([]byte, error) {
	if digest.Algorithm != "sha256" || len(digest.Hex) != 64 {
		return nil, fmt.Errorf("digest %s: want sha256 and 64 hex digits", digest)
	}
	if n := len(kustomizeDigest.FindAll(kustomization, -1)); n != 1 {
		return nil, fmt.Errorf("the kustomization has %d image digest lines, want exactly one", n)
	}
	return kustomizeDigest.ReplaceAll(kustomization, []byte("${1}${2}"+digest.String()+"${3}")), nil
}
