// Command image builds the xds-server container image without a Docker
// engine: one layer holding the static binary, no base image, no shell.
// It writes the image as an OCI image layout archive and prints its digest.
// `make image` runs it; the Dockerfile describes the same image for those
// who build with Docker.
//
//	go run ./hack/image [-o bin/xds-server-image.tar] [-name ringxds/xds-server:v0.1.0]
//	go run ./hack/image pin [-archive bin/xds-server-image.tar] [-kustomization deploy/overlays/release/kustomization.yaml]
//
// pin sets the release overlay's image digest to the archive's, for an
// image pushed from the archive as it is.
//
// The image's timestamps are SOURCE_DATE_EPOCH (the Unix epoch when unset),
// so one binary always gives one digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "pin" {
		err = runPin(os.Args[2:], os.Stdout)
	} else {
		err = runBuild(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func runBuild(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("o", "bin/xds-server-image.tar", "the OCI archive to write")
	name := fs.String("name", defaultName, "the image name the archive's index gives it")
	arch := fs.String("arch", runtime.GOARCH, "the architecture to build for")
	binary := fs.String("binary", "", "a linux xds-server built with the same flags, instead of building one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	created, err := sourceDate()
	if err != nil {
		return err
	}
	bin := *binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "xds-server-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = buildBinary(ctx, dir, *arch); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := newImage(b, *arch, created)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dirOf(*out), 0o755); err != nil {
		return err
	}
	if err := writeArchive(*out, img, *name, *arch, created); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fi, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s linux/%s %d bytes\ndigest %s\n", *out, *name, *arch, fi.Size(), digest)
	return nil
}

func runPin(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image pin", flag.ContinueOnError)
	archive := fs.String("archive", "bin/xds-server-image.tar", "the OCI archive `make image` wrote")
	kustomization := fs.String("kustomization", "deploy/overlays/release/kustomization.yaml", "the kustomization whose image digest to set")
	if err := fs.Parse(args); err != nil {
		return err
	}
	digest, err := archiveDigest(*archive)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(*kustomization)
	if err != nil {
		return err
	}
	pinned, err := pinDigest(old, digest)
	if err != nil {
		return fmt.Errorf("%s: %w", *kustomization, err)
	}
	if err := os.WriteFile(*kustomization, pinned, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: image digest %s\n", *kustomization, digest)
	return nil
}

// sourceDate is SOURCE_DATE_EPOCH, the reproducible-builds convention for
// a build's timestamps, or the Unix epoch.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since the epoch", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			return path[:i+1]
		}
	}
	return "."
}
