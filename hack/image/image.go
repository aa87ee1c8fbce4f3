package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is. The Dockerfile describes the same image; the tests
// hold the two, and deploy/base, to these.
const (
	// binaryPath is where the server lies in the image, and its entrypoint.
	binaryPath = "/xds-server"
	// imageUser is distroless' "nonroot", numeric so that the kubelet can
	// verify runAsNonRoot without an /etc/passwd.
	imageUser = "65532:65532"
	// defaultName is the image deploy/base runs.
	defaultName = "ringxds/xds-server:v0.1.0"
	// serverPackage is the package the image runs.
	serverPackage = "github.com/ringxds/ringxds/cmd/xds-server"
)

// exposedPorts are the xDS port and the metrics port (probes and /metrics).
// The debug listener stays on loopback and is not exposed.
var exposedPorts = []string{"18000/tcp", "18080/tcp"}

// buildFlags build a static, reproducible binary: no cgo (so no libc, and
// no shell or loader in the image), no local paths and no symbol tables.
var buildFlags = []string{"-trimpath", "-ldflags=-s -w"}

// buildBinary builds xds-server for linux/arch into dir with buildFlags, as
// the Dockerfile's build stage does, and returns its path.
func buildBinary(ctx context.Context, dir, arch string) (string, error) {
	out := filepath.Join(dir, "xds-server")
	args := append([]string{"build"}, buildFlags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, serverPackage)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", serverPackage, err, b)
	}
	return out, nil
}

// newImage is an image of one layer holding binary at binaryPath, owned by
// root and not writable by the image's user. created stamps the layer's
// file, its history and the config, so that the same binary gives the same
// digest.
func newImage(binary []byte, arch string, created time.Time) (v1.Image, error) {
	created = created.UTC()
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(binaryPath, "/"),
		Mode:     0o755,
		Size:     int64(len(binary)),
		ModTime:  created,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching) // gzip once, not per read
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "COPY xds-server " + binaryPath,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint:   []string{binaryPath},
		User:         imageUser,
		ExposedPorts: map[string]struct{}{},
	}
	for _, p := range exposedPorts {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	return mutate.ConfigFile(img, cf)
}

// writeArchive writes img as a tar of an OCI image layout (an "OCI
// archive": index.json, oci-layout, blobs/sha256/...), which
// `ctr images import`, `kind load image-archive`, `podman load` and
// `skopeo copy oci-archive:` read. Its index names the image name both
// ways containerd and the OCI spec look for it. The tar's entries are
// sorted and stamped with created, so the same image writes the same bytes.
func writeArchive(out string, img v1.Image, name, arch string, created time.Time) error {
	dir, err := os.MkdirTemp("", "xds-server-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	full, tag := fullName(name)
	err = p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}),
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          full,
			"org.opencontainers.image.ref.name": tag,
		}))
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".xds-server-image-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarDir(tmp, dir, created); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file private; an image archive is not secret.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// fullName is name with the registry containerd gives names without one
// (docker.io), and its tag.
func fullName(name string) (full, tag string) {
	repo, tag := name, "latest"
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		repo, tag = name[:i], name[i+1:]
	}
	first, _, found := strings.Cut(repo, "/")
	if !found || !strings.ContainsAny(first, ".:") && first != "localhost" {
		repo = "docker.io/" + repo
	}
	return repo + ":" + tag, tag
}

// tarDir writes the files under dir into w in name order, owned by root
// and stamped with mtime.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: n, ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, n+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
