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

// Package pki makes the local cluster's certificates and keys: a CA, the
// serving and client certificates of its components, the service-account
// signing key, and the key Tekton Chains signs with.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is how long the local certificates last: a local cluster lives hours.
const validity = 30 * 24 * time.Hour

// Cert is a certificate to sign with the local CA.
type Cert struct {
	// Name names the files: <Name>.crt and <Name>.key.
	Name         string
	CommonName   string
	Organization string
	Server       bool // serverAuth and the SANs below, else clientAuth
	IPs          []net.IP
	DNSNames     []string
}

// Cluster lists the certificates of the control plane and of the node's
// components, given the addresses the API server and the kubelet serve on.
func Cluster(bridgeIP, serviceIP net.IP, node string) []Cert {
	return []Cert{
		{Name: "apiserver", CommonName: "kube-apiserver", Server: true,
			IPs:      []net.IP{net.IPv4(127, 0, 0, 1), bridgeIP, serviceIP},
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{Name: "admin", CommonName: "sso-admin", Organization: "system:masters"},
		{Name: "kube-controller-manager", CommonName: "system:kube-controller-manager"},
		{Name: "kube-scheduler", CommonName: "system:kube-scheduler"},
		{Name: "apiserver-kubelet-client", CommonName: "kube-apiserver-kubelet-client", Organization: "system:masters"},
		{Name: "kubelet-client", CommonName: "system:node:" + node, Organization: "system:nodes"},
		{Name: "kubelet-serving", CommonName: node, Server: true, IPs: []net.IP{bridgeIP}, DNSNames: []string{node}},
		{Name: "kube-proxy", CommonName: "system:kube-proxy"},
	}
}

// Write makes, in dir, the CA (ca.crt, ca.key), each of certs signed by it,
// and the service-account key pair (sa.key, sa.pub). Keys are readable only
// by their owner.
func Write(dir string, certs []Cert) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sso-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	for i, c := range certs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			SerialNumber:          big.NewInt(int64(i) + 2),
			Subject:               pkix.Name{CommonName: c.CommonName},
			NotBefore:             now.Add(-time.Hour),
			NotAfter:              now.Add(validity),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
		}
		if c.Organization != "" {
			t.Subject.Organization = []string{c.Organization}
		}
		if c.Server {
			t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			t.IPAddresses, t.DNSNames = c.IPs, c.DNSNames
		}
		der, err := x509.CreateCertificate(rand.Reader, t, ca, key.Public(), caKey)
		if err != nil {
			return fmt.Errorf("signing %s: %w", c.Name, err)
		}
		if err := writePair(dir, c.Name, der, key); err != nil {
			return err
		}
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	return writePublic(filepath.Join(dir, "sa.pub"), saKey.Public())
}

// SigningKey writes a new ECDSA P-256 private key (PKCS#8 PEM, as Tekton
// Chains reads x509.pem) to keyFile and its public key to pubFile.
func SigningKey(keyFile, pubFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(keyFile, key); err != nil {
		return err
	}
	return writePublic(pubFile, key.Public())
}

func writePair(dir, name string, der []byte, key crypto.Signer) error {
	if err := writeKey(filepath.Join(dir, name+".key"), key); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(file string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func writePublic(file string, key crypto.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}
