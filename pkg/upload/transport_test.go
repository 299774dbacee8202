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

package upload

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPlainHTTPOnlyWhenInsecure: a loopback registry is plain HTTP; the
// committer must not fall back to it on its own.
func TestPlainHTTPOnlyWhenInsecure(t *testing.T) {
	s := httptest.NewServer(registry.New())
	defer s.Close()
	host := strings.TrimPrefix(s.URL, "http://")
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}

	strict, err := name.NewTag(host+"/a/b:1", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	err = remote.Write(strict, img, remote.WithTransport(newTransport(false, nil)))
	if !errors.Is(err, ErrPlainHTTPRefused) && (err == nil || !strings.Contains(err.Error(), "insecure-registry")) {
		t.Fatalf("insecure=false: want plain HTTP refused, got %v", err)
	}

	insecure, err := name.NewTag(host+"/a/b:1", name.StrictValidation, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(insecure, img, remote.WithTransport(newTransport(true, nil))); err != nil {
		t.Fatalf("insecure=true: %v", err)
	}
}

func TestTransportRefusesHTTPDirectly(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.1:5000/v2/", nil)
	if _, err := newTransport(false, nil).RoundTrip(req); !errors.Is(err, ErrPlainHTTPRefused) {
		t.Fatalf("got %v", err)
	}
}

// TestTLSWithPrivateCA: a registry whose certificate a private CA signed is
// refused against the system's roots and taken once the CA is given, with
// its certificate still verified.
func TestTLSWithPrivateCA(t *testing.T) {
	s := httptest.NewTLSServer(registry.New())
	defer s.Close()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(strings.TrimPrefix(s.URL, "https://")+"/a/b:1", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithTransport(newTransport(false, nil))); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: want the certificate refused, got %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())
	if err := remote.Write(tag, img, remote.WithTransport(newTransport(false, roots))); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if err := remote.Write(tag, img, remote.WithTransport(newTransport(false, x509.NewCertPool()))); err == nil {
		t.Fatal("with an empty pool of roots: the certificate was taken")
	}
}

// TestLoadRootCAs: a directory of PEM files gives a pool that verifies what
// they signed; an empty one gives none; a file without a certificate is
// named.
func TestLoadRootCAs(t *testing.T) {
	s := httptest.NewTLSServer(http.NotFoundHandler())
	defer s.Close()
	dir := t.TempDir()
	if pool, err := LoadRootCAs(dir); err != nil || pool != nil {
		t.Fatalf("an empty directory: %v, %v; want no pool", pool, err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..data"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := LoadRootCAs(dir)
	if err != nil || pool == nil {
		t.Fatalf("a directory with ca.crt: %v, %v", pool, err)
	}
	if _, err := s.Certificate().Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("the loaded pool does not verify the server: %v", err)
	}
	bad := filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(bad, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRootCAs(dir); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a file without a certificate: got %v, want an error naming %s", err, bad)
	}
}
