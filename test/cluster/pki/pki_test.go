/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readPEM(t *testing.T, file, wantType string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != wantType {
		t.Fatalf("%s: want one PEM block of type %q", file, wantType)
	}
	return block.Bytes
}

// TestWriteSignsEachCertForItsUse checks that every certificate verifies
// against the CA for its own use (server or client), carries the subject the
// API server's authorizers read, and that each key matches its certificate
// and is readable only by its owner.
func TestWriteSignsEachCertForItsUse(t *testing.T) {
	dir := t.TempDir()
	bridge, service := net.ParseIP("10.88.0.1"), net.ParseIP("10.0.0.1")
	certs := Cluster(bridge, service, "node-0")
	if err := Write(dir, certs); err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(readPEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, c := range certs {
		cert, err := x509.ParseCertificate(readPEM(t, filepath.Join(dir, c.Name+".crt"), "CERTIFICATE"))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		use := x509.ExtKeyUsageClientAuth
		if c.Server {
			use = x509.ExtKeyUsageServerAuth
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			t.Errorf("%s does not verify for %v: %v", c.Name, use, err)
		}
		if cert.Subject.CommonName != c.CommonName || (c.Organization != "" && !slices.Equal(cert.Subject.Organization, []string{c.Organization})) {
			t.Errorf("%s subject = %v, want CN=%s O=%s", c.Name, cert.Subject, c.CommonName, c.Organization)
		}
		keyFile := filepath.Join(dir, c.Name+".key")
		key, err := x509.ParsePKCS8PrivateKey(readPEM(t, keyFile, "PRIVATE KEY"))
		if err != nil {
			t.Fatalf("%s key: %v", c.Name, err)
		}
		if !key.(*ecdsa.PrivateKey).PublicKey.Equal(cert.PublicKey) {
			t.Errorf("%s.key does not match %s.crt", c.Name, c.Name)
		}
		if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v (%v), want 0600", keyFile, fi.Mode().Perm(), err)
		}
	}
	apiserver, _ := x509.ParseCertificate(readPEM(t, filepath.Join(dir, "apiserver.crt"), "CERTIFICATE"))
	for _, host := range []string{"127.0.0.1", "10.88.0.1", "10.0.0.1", "kubernetes.default.svc"} {
		if err := apiserver.VerifyHostname(host); err != nil {
			t.Errorf("apiserver.crt: %v", err)
		}
	}
	saKey, err := x509.ParsePKCS8PrivateKey(readPEM(t, filepath.Join(dir, "sa.key"), "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	saPub, err := x509.ParsePKIXPublicKey(readPEM(t, filepath.Join(dir, "sa.pub"), "PUBLIC KEY"))
	if err != nil {
		t.Fatal(err)
	}
	if !saKey.(*rsa.PrivateKey).PublicKey.Equal(saPub) {
		t.Error("sa.pub is not the public half of sa.key")
	}
}

// TestSigningKey checks that the Chains key is a PKCS#8 P-256 key whose
// public half is the one written beside it.
func TestSigningKey(t *testing.T) {
	dir := t.TempDir()
	keyFile, pubFile := filepath.Join(dir, "x509.pem"), filepath.Join(dir, "cosign.pub")
	if err := SigningKey(keyFile, pubFile); err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(readPEM(t, keyFile, "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve.Params().Name != "P-256" {
		t.Fatalf("key is %T, want a P-256 ECDSA key", key)
	}
	pub, err := x509.ParsePKIXPublicKey(readPEM(t, pubFile, "PUBLIC KEY"))
	if err != nil {
		t.Fatal(err)
	}
	if !ec.PublicKey.Equal(pub) {
		t.Error("cosign.pub is not the public half of x509.pem")
	}
}
