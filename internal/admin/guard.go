// Browser guard of the admin endpoint: a web page the operator opens must not drive it, by a cross-site request (CSRF) or through a name that resolves to loopback (DNS rebinding).

package admin

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// guardBrowsers refuses, on a TCP endpoint, what only a browser sends on
// behalf of another site: an Origin header other than the endpoint's own,
// and a POST with a form's content type (a cross-site form sends one
// without asking, and no admin request has a body). Without a token it
// also refuses a Host other than loopback or the endpoint's own address
// with its port: a page whose name is made to resolve to 127.0.0.1
// reaches the endpoint, but under its own name. Prometheus, curl and
// 'splicer' send no Origin and name the address they dial, so they pass.
// A unix socket (a worker's, reached only by its master) is not guarded.
func guardBrowsers(addr net.Addr, token string, next http.Handler) http.Handler {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return next
	}
	own := ta.AddrPort()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" && !localHost(r.Host, own) {
			http.Error(w, "forbidden: Host "+strconv.Quote(r.Host)+" is not this admin endpoint's address (set admin_token to reach it under another name)", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !strings.EqualFold(o, "http://"+r.Host) {
			http.Error(w, "forbidden: cross-origin request (Origin "+strconv.Quote(o)+")", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && formContentType(r.Header.Get("Content-Type")) {
			http.Error(w, "unsupported media type: admin requests take no form body", http.StatusUnsupportedMediaType)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether host (a Host header) names the endpoint at
// own: localhost, a loopback IP or own's IP, with own's port (80 may be
// left out). A DNS name other than localhost never passes, whatever it
// resolves to.
func localHost(host string, own netip.AddrPort) bool {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = strings.Trim(host, "[]"), "80"
	}
	if port != strconv.Itoa(int(own.Port())) {
		return false
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || (ip == own.Addr().Unmap() && !ip.IsUnspecified())
}

// formContentType reports whether ct is one a browser sends cross-site
// without a preflight from an HTML form.
func formContentType(ct string) bool {
	ct, _, _ = strings.Cut(strings.ToLower(ct), ";")
	switch strings.TrimSpace(ct) {
	case "application/x-www-form-urlencoded", "multipart/form-data", "text/plain":
		return true
	}
	return false
}
