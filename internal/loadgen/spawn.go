package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Spawner runs xds-server as a child process on free loopback ports, so a
// measurement needs nothing running beforehand. It implements Lifecycle.
type Spawner struct {
	// Bin is the xds-server binary.
	Bin string
	// File is the endpoints file it serves.
	File string
	// Debounce, if non-zero, is passed as --debounce.
	Debounce time.Duration
	// Env is added to the inherited environment, for runtime settings
	// such as GOMEMLIMIT or GOGC.
	Env []string
	// LogPath receives the server's output (appended); empty discards it.
	LogPath string
	// Logger receives progress; nil discards it.
	Logger *zap.Logger

	xdsAddr, debugAddr string
	cmd                *exec.Cmd
	exited             chan struct{}
}

var _ Lifecycle = (*Spawner)(nil)

// Start starts the server and waits until it is ready.
func (s *Spawner) Start(ctx context.Context) (string, string, error) {
	if s.cmd != nil {
		return "", "", errors.New("xds-server is already running")
	}
	if s.Logger == nil {
		s.Logger = zap.NewNop()
	}
	if s.xdsAddr == "" {
		var err error
		if s.xdsAddr, err = freePort(); err != nil {
			return "", "", err
		}
		if s.debugAddr, err = freePort(); err != nil {
			return "", "", err
		}
	}
	args := []string{"--file", s.File, "--xds-addr", s.xdsAddr, "--debug-addr", s.debugAddr, "--log-level", "warn"}
	if s.Debounce > 0 {
		args = append(args, "--debounce", s.Debounce.String())
	}
	cmd := exec.Command(s.Bin, args...)
	cmd.SysProcAttr = childAttr()
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	if s.LogPath != "" {
		f, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return "", "", fmt.Errorf("server log: %w", err)
		}
		defer f.Close() // the child holds its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("start %s: %w", s.Bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	s.Logger.Info("xds-server started", zap.Int("pid", cmd.Process.Pid), zap.String("xds", s.xdsAddr), zap.String("debug", s.debugAddr))

	// Ready means the first snapshot is published.
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("http://" + s.debugAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s.xdsAddr, s.debugAddr, nil
			}
		}
		select {
		case <-s.exited:
			s.cmd = nil
			return "", "", fmt.Errorf("xds-server exited during start-up (see %s)", s.LogPath)
		case <-ctx.Done():
			_ = s.Stop(context.Background())
			return "", "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop(ctx)
			return "", "", fmt.Errorf("xds-server not ready within 30 s (see %s)", s.LogPath)
		}
	}
}

// Stop asks the server to stop (SIGTERM: it drains for up to 2 s), and
// kills it if it has not exited 10 s later.
func (s *Spawner) Stop(context.Context) error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd = nil }()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill xds-server: %w", err)
	}
	<-s.exited
	return nil
}

// freePort returns a loopback address nothing listens on right now. The
// port is reused across restarts, as a restarted pod keeps its Service.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}
