// A self-signed certificate made at bench start, for the TLS origin and the forwarders that terminate TLS.

package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// tlsServerName is the name the tls experiment's clients send in SNI and
// that its certificate covers; the SNI routers route it and nothing else.
const tlsServerName = "a.test"

// tlsFiles are a certificate and its key as PEM files: apart (nginx,
// splicer) and together in one file (HAProxy's crt).
type tlsFiles struct {
	cert, key, both string
}

// writeSelfSigned makes an ECDSA P-256 key and a self-signed certificate
// for names (P-256, as most sites now serve and every peer here supports)
// and writes them into dir.
func writeSelfSigned(dir string, names ...string) (*tlsFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// Its own issuer: a client that trusts it verifies it as a root.
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
	f := &tlsFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), both: filepath.Join(dir, "tls.pem")}
	for _, w := range []struct {
		path string
		data []byte
	}{{f.cert, certPEM}, {f.key, keyPEM}, {f.both, append(append([]byte{}, certPEM...), keyPEM...)}} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
	}
	return f, nil
}
