// TLS keys: an http-reverse listener's tls section (termination) and a pool's (TLS to its servers), with checks that read the files.

package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"time"
)

// TLS terminates TLS on an http-reverse listener: the client side is
// decrypted by the forwarder (Go's crypto/tls, in user space), and every
// body is copied through the process, never spliced.
type TLS struct {
	// Certificates are the listener's certificate and key pairs: a
	// client's server name (SNI) picks the one whose certificate names
	// it (a "*.suffix" name covers one label), and the first one listed
	// answers a client that names none or one no certificate names.
	Certificates []Certificate `yaml:"certificates"`
	// MinVersion is the lowest TLS version accepted: "1.2" (the
	// default) or "1.3".
	MinVersion string `yaml:"min_version,omitempty"`
	// TicketKeyRotation is how often the key that encrypts session
	// tickets (resumption) is replaced; the two before it still decrypt
	// the tickets they sealed. Default 1h.
	TicketKeyRotation Duration `yaml:"ticket_key_rotation,omitempty"`
}

// Certificate is a certificate chain and its private key, each a PEM
// file; a relative path is taken from the configuration file's directory.
type Certificate struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// UpstreamTLS has a pool's servers reached over TLS.
type UpstreamTLS struct {
	// ServerName is the name sent in SNI and checked against the
	// servers' certificates; default: the host of each server's address.
	ServerName string `yaml:"server_name,omitempty"`
	// CAFile holds the PEM certificates the servers' chains must lead
	// to; default: the host's roots. A relative path is taken from the
	// configuration file's directory.
	CAFile string `yaml:"ca_file,omitempty"`
	// InsecureSkipVerify accepts any certificate a server shows: for a
	// test origin only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify,omitempty"`
}

// DefaultTicketKeyRotation is the default of ticket_key_rotation.
const DefaultTicketKeyRotation = time.Hour

// TLSVersions maps min_version's values to crypto/tls's versions.
var TLSVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// MinTLSVersion is t's min_version as crypto/tls's number (1.2 when left
// out).
func (t *TLS) MinTLSVersion() uint16 {
	if v, ok := TLSVersions[t.MinVersion]; ok {
		return v
	}
	return tls.VersionTLS12
}

// TicketRotation is t's ticket_key_rotation, its default filled in.
func (t *TLS) TicketRotation() time.Duration {
	if t.TicketKeyRotation > 0 {
		return t.TicketKeyRotation.Std()
	}
	return DefaultTicketKeyRotation
}

// LoadPair reads c's certificate chain and key and checks they belong
// together; the error names the file at fault.
func (c Certificate) LoadPair() (tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &pairError{c, err}
	}
	return pair, nil
}

// pairError: a certificate and key that are not PEM, or do not match.
type pairError struct {
	c   Certificate
	err error
}

func (e *pairError) Error() string {
	return e.c.CertFile + " and " + e.c.KeyFile + ": " + e.err.Error()
}

func (e *pairError) Unwrap() error { return e.err }

// LoadCAs reads the PEM certificates of u.CAFile into a pool; nil (the
// host's roots) when none is given.
func (u *UpstreamTLS) LoadCAs() (*x509.CertPool, error) {
	if u.CAFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(u.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &caError{u.CAFile}
	}
	return pool, nil
}

type caError struct{ file string }

func (e *caError) Error() string { return e.file + ": no PEM certificate in it" }

// resolveTLSPaths takes the TLS files' relative paths from dir, the
// configuration file's directory.
func (c *Config) resolveTLSPaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if l.TLS != nil {
			for j := range l.TLS.Certificates {
				abs(&l.TLS.Certificates[j].CertFile)
				abs(&l.TLS.Certificates[j].KeyFile)
			}
		}
		for j := range l.Pools {
			if t := l.Pools[j].TLS; t != nil {
				abs(&t.CAFile)
			}
		}
	}
}

// tls checks an http-reverse listener's tls section: each certificate's
// files are read, and each key must match its certificate.
func (v *validator) tls(p string, t *TLS) {
	if t == nil {
		return
	}
	if len(t.Certificates) == 0 {
		v.errorf(p+".certificates", "tls needs at least one certificate (cert_file and key_file)")
	}
	for i, c := range t.Certificates {
		cp := p + ".certificates[" + itoa(i) + "]"
		switch {
		case c.CertFile == "":
			v.errorf(cp, "missing required key \"cert_file\"")
		case c.KeyFile == "":
			v.errorf(cp, "missing required key \"key_file\"")
		default:
			if _, err := c.LoadPair(); err != nil {
				v.errorf(cp, "%v", tlsFileError(err))
			}
		}
	}
	if t.MinVersion != "" {
		if _, ok := TLSVersions[t.MinVersion]; !ok {
			v.errorf(p+".min_version", "unknown value %q (allowed: 1.2, 1.3)", t.MinVersion)
		}
	}
	if t.TicketKeyRotation < 0 || t.TicketKeyRotation > 0 && t.TicketKeyRotation.Std() < time.Minute {
		v.errorf(p+".ticket_key_rotation", "expected at least 1m, got %s", t.TicketKeyRotation)
	}
}

// upstreamTLS checks a pool's tls section: its CA file, if any, must hold
// certificates.
func (v *validator) upstreamTLS(p string, u *UpstreamTLS) {
	if u == nil {
		return
	}
	if _, err := u.LoadCAs(); err != nil {
		v.errorf(p+".ca_file", "%v", tlsFileError(err))
	}
	if u.InsecureSkipVerify && u.CAFile != "" {
		v.errorf(p+".insecure_skip_verify", "ca_file is not used when verification is off: leave one out")
	}
}

// tlsFileError says which of a certificate's problems err is.
func tlsFileError(err error) string {
	switch e := err.(type) {
	case *os.PathError:
		return "cannot read " + e.Path + ": " + e.Err.Error()
	case *pairError:
		return "certificate " + e.c.CertFile + " and key " + e.c.KeyFile + " do not make a pair (" + e.err.Error() + ")"
	}
	return err.Error()
}
