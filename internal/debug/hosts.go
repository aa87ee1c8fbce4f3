package debug

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// HostOptions decide which Host headers CheckHost admits besides loopback
// names and addresses.
type HostOptions struct {
	// Allowed are further host names or IP addresses, without port or
	// scheme (a port-forward's DNS name, an address on a trusted network).
	// "*.example.com" admits the subdomains of example.com.
	Allowed []string
	// Hostname is this machine's name, a pod's name in Kubernetes, which
	// is admitted; empty means os.Hostname.
	Hostname string
	// Addrs are this machine's addresses, a pod's IP in Kubernetes, which
	// are admitted; nil means the addresses of its interfaces. The address
	// a request was received on is always admitted.
	Addrs  []netip.Addr
	Logger *zap.Logger
}

// CheckHost wraps next so that it answers only requests whose Host header
// names this machine: a loopback address, localhost (or a name under
// .localhost), the address the request came in on or another of the
// machine's own, its hostname, or opts.Allowed. Anything else gets 403.
//
// This defeats DNS rebinding: a page from attacker.example that has its
// name re-resolved to 127.0.0.1 (or to a port-forwarded or pod address)
// reaches the listener, but its requests carry Host: attacker.example. A
// request without a Host header (HTTP/1.0) is admitted: browsers always
// send one.
func CheckHost(next http.Handler, opts HostOptions) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	g := &hostGuard{next: next, log: opts.Logger, names: map[string]bool{}, addrs: map[netip.Addr]bool{}}
	for _, a := range opts.Allowed {
		a = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(a), "."))
		if ip, err := netip.ParseAddr(a); err == nil {
			g.addrs[ip.Unmap().WithZone("")] = true
			continue
		}
		name, wild := strings.CutPrefix(a, "*.")
		if !validHostName(name) {
			return nil, fmt.Errorf("allowed host %q is not a host name, *.domain or IP address (no port, no scheme)", a)
		}
		if wild {
			g.suffixes = append(g.suffixes, "."+name)
		} else {
			g.names[name] = true
		}
	}
	hostname := opts.Hostname
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	if hostname = strings.ToLower(strings.TrimSuffix(hostname, ".")); hostname != "" {
		g.names[hostname] = true
	}
	addrs := opts.Addrs
	if addrs == nil {
		addrs = interfaceAddrs()
	}
	for _, ip := range addrs {
		g.addrs[ip.Unmap().WithZone("")] = true
	}
	return g, nil
}

type hostGuard struct {
	next     http.Handler
	log      *zap.Logger
	names    map[string]bool
	suffixes []string
	addrs    map[netip.Addr]bool
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.allowed(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	host := r.Host
	if len(host) > 256 {
		host = host[:256] + "..."
	}
	g.log.Debug("refused a debug request for another host", zap.String("host", host), zap.String("remote", r.RemoteAddr), zap.String("path", r.URL.Path))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "403 Forbidden: Host %s is not this server.\n"+
		"The ringxds debug listener answers only to localhost, loopback addresses, this host's own addresses and name,\n"+
		"and the names given with --debug-allowed-hosts, so that a web page cannot reach it by DNS rebinding.\n"+
		"If you reach ringxds through that name, add it to --debug-allowed-hosts.\n", strconv.Quote(host))
}

func (g *hostGuard) allowed(r *http.Request) bool {
	if r.Host == "" {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		if ip.IsLoopback() || g.addrs[ip] {
			return true
		}
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(local.String()); err == nil && ap.Addr().Unmap().WithZone("") == ip {
				return true
			}
		}
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || g.names[host] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// validHostName reports whether s is a DNS name: dot-separated labels of
// letters, digits, '-' and '_'.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return []netip.Addr{}
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}
