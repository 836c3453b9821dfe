// The tls keys: files read at load with clear errors, paths taken from the configuration's directory.

package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tlsListener is an http-reverse listener whose tls section is section,
// and whose pool's is pool.
func tlsListener(section, pool string) []byte {
	return lines(
		"listeners:",
		"  - name: secure",
		"    listen: ':8444'",
		"    proxy: http-reverse",
		"    tls: "+section,
		"    routes: [{pool: web}]",
		"    pools: [{name: web, servers: ['h:80'], tls: "+pool+"}]",
	)
}

// exampleCert is examples/tls's pair, by absolute paths.
func exampleCert(tb testing.TB) (crt, key string) {
	tb.Helper()
	dir, err := filepath.Abs(examplePath("tls"))
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(dir, "test.crt"), filepath.Join(dir, "test.key")
}

func TestTLSKeysLoad(t *testing.T) {
	crt, key := exampleCert(t)
	cfg := mustParse(t, tlsListener("{certificates: [{cert_file: "+crt+", key_file: "+key+"}], min_version: '1.3'}", "{server_name: origin.test}"))
	l := cfg.Listeners[0]
	if l.TLS.MinTLSVersion() != TLSVersions["1.3"] || l.TLS.TicketRotation() != DefaultTicketKeyRotation {
		t.Errorf("tls = %+v: want min_version 1.3 and the default rotation", l.TLS)
	}
	if l.Pools[0].TLS == nil || l.Pools[0].TLS.ServerName != "origin.test" || l.Pools[0].TLS.InsecureSkipVerify {
		t.Errorf("pool tls = %+v, want server_name origin.test, verification on", l.Pools[0].TLS)
	}
}

// TestTLSKeysRefused: each mistake in a tls section is reported on its
// line, saying what is wrong with which file.
func TestTLSKeysRefused(t *testing.T) {
	crt, key := exampleCert(t)
	dir := t.TempDir()
	other := filepath.Join(dir, "other.key") // a key of no certificate here
	writeKey(t, other)
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	for _, c := range []struct{ name, section, pool, want string }{
		{"unreadable", "{certificates: [{cert_file: " + dir + "/missing.crt, key_file: " + key + "}]}", "null",
			"cannot read " + dir + "/missing.crt: no such file or directory"},
		{"mismatch", "{certificates: [{cert_file: " + crt + ", key_file: " + other + "}]}", "null",
			"certificate " + crt + " and key " + other + " do not make a pair"},
		{"no-key", "{certificates: [{cert_file: " + crt + "}]}", "null", `missing required key "key_file"`},
		{"none", "{min_version: '1.2'}", "null", "tls needs at least one certificate"},
		{"min-version", "{certificates: [{cert_file: " + crt + ", key_file: " + key + "}], min_version: '1.1'}", "null",
			`unknown value "1.1" (allowed: 1.2, 1.3)`},
		{"rotation", "{certificates: [{cert_file: " + crt + ", key_file: " + key + "}], ticket_key_rotation: 1s}", "null",
			"expected at least 1m"},
		{"ca-file", "{certificates: [{cert_file: " + crt + ", key_file: " + key + "}]}", "{ca_file: " + notPEM + "}",
			notPEM + ": no PEM certificate in it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := parseErrors(t, tlsListener(c.section, c.pool))
			if len(errs) != 1 || !strings.Contains(errs[0].Msg, c.want) {
				t.Errorf("errors %v, want one saying %q", errs, c.want)
			}
		})
	}
}

// TestTLSOnlyHTTPReverse: another kind's tls section is refused, not ignored.
func TestTLSOnlyHTTPReverse(t *testing.T) {
	crt, key := exampleCert(t)
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: plain",
		"    listen: ':7000'",
		"    upstream: ['h:80']",
		"    tls: {certificates: [{cert_file: "+crt+", key_file: "+key+"}]}",
	))
	if len(errs) != 1 || errs[0].Line != 5 || !strings.Contains(errs[0].Msg, "section tls is not used by proxy tcp") {
		t.Errorf("errors %v, want one on line 5 saying tcp does not use tls", errs)
	}
}

// TestTLSPathsFromConfigDir: relative file names are taken from the
// configuration file's directory, whatever the working directory.
func TestTLSPathsFromConfigDir(t *testing.T) {
	cfg, err := Load(examplePath("https.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crt, key := exampleCert(t)
	got := cfg.Listeners[0].TLS.Certificates[0]
	if got.CertFile != crt || got.KeyFile != key {
		t.Errorf("certificate files %+v, want %s and %s", got, crt, key)
	}
}

// writeKey writes a new EC private key, of no certificate, to path.
func writeKey(tb testing.TB, path string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
