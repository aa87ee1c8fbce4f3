package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/internal/kubetest"
)

// built is the image `make image` would write, built once for all tests:
// building the static binary is the slow part.
var built struct {
	once    sync.Once
	dir     string
	binary  string // the binary go build wrote
	archive string // the OCI archive

	extractOnce sync.Once
	extracted   string // the archive's xds-server, written out
	err         error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildArchive builds the binary and writes the archive as `make image`
// does, with the epoch as its date.
func buildArchive(t *testing.T) (binary, archive string) {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "hack-image-test-"); built.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var out bytes.Buffer
		built.archive = filepath.Join(built.dir, "xds-server-image.tar")
		built.err = runBuild(ctx, []string{"-o", built.archive}, &out)
		if built.err != nil {
			return
		}
		// runBuild removed its binary; build another the same way for the
		// reproducibility check (go build's cache makes it quick).
		built.binary, built.err = buildBinary(ctx, built.dir, runtime.GOARCH)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.binary, built.archive
}

// readArchive opens the archive as an OCI image layout, as an importer
// would, and returns the index's one descriptor and its image.
func readArchive(t *testing.T, archive string) (v1.Descriptor, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("the archive is not an OCI image layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index lists %d manifests, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatalf("image %s: %v", im.Manifests[0].Digest, err)
	}
	// Reading each layer checks its digest against the manifest.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatalf("layer: %v", err)
		}
		rc.Close()
	}
	return im.Manifests[0], img
}

// layerFiles are the regular files and directories of the image's one
// layer, with their contents.
func layerFiles(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[hdr.Name] = hdr
		if data[hdr.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// baseContainer is deploy/base's xds-server container and Pod security
// context, which the image must suit.
func baseContainer(t *testing.T) (ctr, podSecurity map[string]any) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext map[string]any   `yaml:"securityContext"`
					Containers      []map[string]any `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c["name"] == "xds-server" {
			return c, dep.Spec.Template.Spec.SecurityContext
		}
	}
	t.Fatal("deploy/base/deployment.yaml has no xds-server container")
	return nil, nil
}

// TestImageConfig checks the image as an importer reads it from the
// archive: the entrypoint is the static binary, the only file; it runs as
// the numeric non-root user deploy/base requires, and exposes the ports
// deploy/base declares.
func TestImageConfig(t *testing.T) {
	_, archive := buildArchive(t)
	desc, img := readArchive(t, archive)
	if got := desc.Annotations["io.containerd.image.name"]; got != "docker.io/"+defaultName {
		t.Errorf("index names the image %q, want docker.io/%s", got, defaultName)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("index platform = %v, want linux/%s", desc.Platform, runtime.GOARCH)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform = %s/%s", cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/xds-server"}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/xds-server] alone (exec form: no shell runs it)", cf.Config.Entrypoint, cf.Config.Cmd)
	}

	// Numeric, non-root, and what the Pods run as.
	user, group, ok := strings.Cut(cf.Config.User, ":")
	uid, uerr := strconv.Atoi(user)
	gid, gerr := strconv.Atoi(group)
	if !ok || uerr != nil || gerr != nil || uid == 0 || gid == 0 {
		t.Errorf("user %q: want numeric uid:gid, neither root (runAsNonRoot verifies only numbers)", cf.Config.User)
	}
	ctr, podSecurity := baseContainer(t)
	if podSecurity["runAsUser"] != uid || podSecurity["runAsGroup"] != gid || podSecurity["fsGroup"] != gid {
		t.Errorf("deploy/base runs as %v, the image as %s", podSecurity, cf.Config.User)
	}
	if ctr["image"] != defaultName {
		t.Errorf("deploy/base runs %v, the archive is named %s", ctr["image"], defaultName)
	}

	var basePorts []string
	for _, p := range ctr["ports"].([]any) {
		pm := p.(map[string]any)
		basePorts = append(basePorts, fmt.Sprintf("%v/%s", pm["containerPort"], strings.ToLower(fmt.Sprint(pm["protocol"]))))
	}
	if got := slices.Sorted(maps.Keys(cf.Config.ExposedPorts)); !slices.Equal(got, []string{"18000/tcp", "18080/tcp"}) || !slices.Equal(got, slices.Sorted(slices.Values(basePorts))) {
		t.Errorf("exposed ports %v, want 18000/tcp and 18080/tcp as deploy/base declares (%v)", got, basePorts)
	}

	// One file, the server: no shell, no libc, nothing writable by the user.
	hdrs, data := layerFiles(t, img)
	if names := slices.Sorted(maps.Keys(hdrs)); !slices.Equal(names, []string{"xds-server"}) {
		t.Errorf("layer holds %v, want only xds-server", names)
	}
	hdr := hdrs["xds-server"]
	if hdr == nil || hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 != 0o111 || hdr.Mode&0o022 != 0 || hdr.Uid != 0 {
		t.Fatalf("xds-server entry %+v: want a root-owned executable regular file nobody else may write", hdr)
	}
	checkStatic(t, data["xds-server"])
}

// checkStatic fails unless b is a static ELF executable for this machine:
// no program interpreter, no shared libraries. Such a binary runs in an
// image with nothing else in it.
func checkStatic(t *testing.T, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("xds-server is not an ELF file: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("xds-server has a program interpreter: it is dynamically linked")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) > 0 {
		t.Errorf("xds-server needs shared libraries %v (%v)", libs, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if want != elf.EM_NONE && f.Machine != want {
		t.Errorf("xds-server is for %v, the image says %s", f.Machine, runtime.GOARCH)
	}
}

// TestImageReproducible: the archive make image wrote holds the digest a
// rebuild of the same binary gives, and pin reads that digest back; one
// image writes one archive, byte for byte; the date reaches the digest (so
// fixing it is what makes the digest reproducible).
func TestImageReproducible(t *testing.T) {
	binary, archive := buildArchive(t)
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(0, 0)
	img, err := newImage(b, runtime.GOARCH, epoch)
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	got, err := archiveDigest(archive)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("make image's archive holds %s, a rebuild of the same binary %s", got, want)
	}

	// The archive bytes and the date, on a small stand-in binary: gzip of
	// the real one is slow under the race detector.
	small := bytes.Repeat([]byte("not really an ELF binary\n"), 4096)
	var digests []v1.Hash
	var archives [][]byte
	for i, created := range []time.Time{epoch, epoch, epoch.Add(time.Second)} {
		img, err := newImage(small, runtime.GOARCH, created)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), fmt.Sprintf("%d.tar", i))
		if err := writeArchive(out, img, defaultName, runtime.GOARCH, created); err != nil {
			t.Fatal(err)
		}
		a, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		digests, archives = append(digests, d), append(archives, a)
	}
	if digests[0] != digests[1] || !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("two builds of one binary differ: %v", digests[:2])
	}
	if digests[2] == digests[0] {
		t.Errorf("the image's date does not reach its digest")
	}
}

// extractServer writes the image's xds-server, read from the archive's
// layer, to a folder and returns its path.
func extractServer(t *testing.T) string {
	t.Helper()
	_, archive := buildArchive(t)
	built.extractOnce.Do(func() {
		_, img := readArchive(t, archive)
		hdrs, data := layerFiles(t, img)
		bin := filepath.Join(built.dir, "extracted", "xds-server")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data["xds-server"], os.FileMode(hdrs["xds-server"].Mode)&0o777); err != nil {
			t.Fatal(err)
		}
		built.extracted = bin
	})
	if built.extracted == "" {
		t.Fatal("the image's xds-server could not be extracted (see the first test that tried)")
	}
	return built.extracted
}

// baseArgs are deploy/base's arguments with every listener moved to a free
// loopback port; metrics is the address of /readyz.
func baseArgs(t *testing.T) (args []string, metrics string) {
	t.Helper()
	ctr, _ := baseContainer(t)
	moved := 0
	for _, a := range ctr["args"].([]any) {
		arg := a.(string)
		for _, flag := range []string{"--xds-addr=", "--metrics-addr=", "--debug-addr="} {
			if strings.HasPrefix(arg, flag) {
				addr := freeAddr(t)
				arg = flag + addr
				moved++
				if flag == "--metrics-addr=" {
					metrics = addr
				}
			}
		}
		args = append(args, arg)
	}
	if moved != 3 || metrics == "" {
		t.Fatalf("deploy/base's arguments %q lack --xds-addr, --metrics-addr or --debug-addr", ctr["args"])
	}
	return args, metrics
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve starts bin with args, stops it when t ends, and waits until
// http://metrics/readyz answers 200.
func serve(t *testing.T, bin string, args []string, metrics string, wait time.Duration) {
	t.Helper()
	var logs bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(wait)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("xds-server %q exited before it was ready: %v\n%s", args, err, logs.String())
		default:
		}
		resp, err := client.Get("http://" + metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("xds-server %q: /readyz not 200 within %v (last: %v)\n%s", args, wait, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestImageServes starts the image's binary, as extracted from its layer,
// with deploy/base's flags on loopback but its embedded default endpoints
// (the file source) in place of Kubernetes: it must answer /readyz.
func TestImageServes(t *testing.T) {
	bin := extractServer(t)
	args, metrics := baseArgs(t)
	args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--source=") })
	serve(t, bin, args, metrics, 30*time.Second)
}

// TestKubeImageServes starts the image's binary with deploy/base's flags
// as they are, the Kubernetes source included, against a real
// kube-apiserver: it checks its permissions, syncs its informers over TLS
// with the kubeconfig's CA (the image has no CA bundle), and answers
// /readyz.
func TestKubeImageServes(t *testing.T) {
	env := kubetest.Start(t)
	bin := extractServer(t)
	args, metrics := baseArgs(t)
	if !slices.Contains(args, "--source=kubernetes") {
		t.Fatalf("deploy/base's arguments %q lack --source=kubernetes", args)
	}
	serve(t, bin, append(args, "--kubeconfig="+env.Kubeconfig(t)), metrics, 60*time.Second)
}

// dockerfile is the Dockerfile's instructions by stage, continuation lines
// joined and comments dropped.
func dockerfile(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]string
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		instr := cur + trimmed
		cur = ""
		if strings.HasPrefix(strings.ToUpper(instr), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before any FROM", instr)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], instr)
	}
	return stages
}

// TestDockerfileAgrees checks that the Dockerfile builds the image this
// builder does: the binary built with the same flags, alone on scratch at
// the same path, the same user, entrypoint and ports.
func TestDockerfileAgrees(t *testing.T) {
	stages := dockerfile(t)
	final := stages[len(stages)-1]
	if !strings.EqualFold(final[0], "FROM scratch") {
		t.Errorf("final stage %q, want FROM scratch (the binary alone, no base image)", final[0])
	}
	got := map[string][]string{}
	for _, instr := range final[1:] {
		kw, rest, _ := strings.Cut(instr, " ")
		got[strings.ToUpper(kw)] = append(got[strings.ToUpper(kw)], strings.TrimSpace(rest))
	}
	for kw := range got {
		if !slices.Contains([]string{"COPY", "USER", "EXPOSE", "ENTRYPOINT"}, kw) {
			t.Errorf("final stage has %s %q, which the Go builder does not do", kw, got[kw])
		}
	}
	if u := got["USER"]; len(u) != 1 || u[0] != imageUser {
		t.Errorf("USER %q, want %s", u, imageUser)
	}
	if e := got["ENTRYPOINT"]; len(e) != 1 || e[0] != `["`+binaryPath+`"]` {
		t.Errorf("ENTRYPOINT %q, want [%q] (exec form)", e, binaryPath)
	}
	var ports []string
	for _, e := range got["EXPOSE"] {
		for _, p := range strings.Fields(e) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			ports = append(ports, p)
		}
	}
	if slices.Sort(ports); !slices.Equal(ports, exposedPorts) {
		t.Errorf("EXPOSE %v, want %v", ports, exposedPorts)
	}
	copyRe := regexp.MustCompile(`^--from=(\S+) (\S+) (\S+)$`)
	c := got["COPY"]
	var m []string
	if len(c) == 1 {
		m = copyRe.FindStringSubmatch(c[0])
	}
	if m == nil || m[3] != binaryPath {
		t.Fatalf("COPY %q, want one COPY --from=<stage> <binary> %s", c, binaryPath)
	}

	// The copied binary is built as buildBinary builds it.
	var build string
	for _, s := range stages[:len(stages)-1] {
		if strings.HasSuffix(s[0], " AS "+m[1]) || strings.HasSuffix(s[0], " as "+m[1]) {
			for _, instr := range s {
				if strings.HasPrefix(instr, "RUN ") && strings.Contains(instr, "go build") {
					build = strings.ReplaceAll(instr, `"`, "")
				}
			}
		}
	}
	if build == "" {
		t.Fatalf("no stage %s with a RUN go build", m[1])
	}
	for _, want := range append([]string{"CGO_ENABLED=0", "GOOS=linux", "-o " + m[2], "./cmd/xds-server"}, buildFlags...) {
		if !strings.Contains(build, want) {
			t.Errorf("the Dockerfile's build %q lacks %s", build, want)
		}
	}
}

// TestReleasePin checks that pin sets the release overlay's digest, and
// only it, to the archive's, and that the checked-in digest is well formed.
func TestReleasePin(t *testing.T) {
	const path = "../../deploy/overlays/release/kustomization.yaml"
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	digestOf := func(b []byte) string {
		var k struct {
			Images []map[string]string `yaml:"images"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		if len(k.Images) != 1 || k.Images[0]["newTag"] != "" {
			t.Fatalf("release images %v: want one entry, pinned by digest alone", k.Images)
		}
		return k.Images[0]["digest"]
	}
	if d := digestOf(orig); !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(d) {
		t.Errorf("the release overlay's digest %q is not sha256:<64 hex digits>", d)
	}

	_, archive := buildArchive(t)
	want, err := archiveDigest(archive)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "kustomization.yaml")
	if err := os.WriteFile(copyPath, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runPin([]string{"-archive", archive, "-kustomization", copyPath}, &out); err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := digestOf(pinned); got != want.String() {
		t.Errorf("pinned digest %s, want the archive's %s", got, want)
	}
	ol, pl := strings.Split(string(orig), "\n"), strings.Split(string(pinned), "\n")
	changed := 0
	for i := range min(len(ol), len(pl)) {
		if ol[i] != pl[i] {
			changed++
		}
	}
	if len(ol) != len(pl) || changed > 1 {
		t.Errorf("pin changed %d lines (and %d -> %d lines), want the digest line alone", changed, len(ol), len(pl))
	}

	// Anything but exactly one digest line is refused, not guessed at.
	for _, k := range []string{"images:\n  - name: x\n    newTag: v1\n", string(orig) + "  - name: y\n    digest: " + want.String() + "\n"} {
		if _, err := pinDigest([]byte(k), want); err == nil {
			t.Errorf("pin accepted %q", k)
		}
	}
}
