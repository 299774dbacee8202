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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// userAgent is the User-Agent of every registry request.
const userAgent = "sandbox-snapshot-operator-committer"

// ErrPlainHTTPRefused is wrapped by errors for plain-HTTP registry requests
// made while insecure-registry is false.
var ErrPlainHTTPRefused = fmt.Errorf("plain HTTP to a registry is refused because insecure-registry is \"false\"")

// RemoteOptions returns the go-containerregistry options every registry
// request takes: the transport of newTransport(insecure, roots), the user
// agent and the retry policy.
func RemoteOptions(insecure bool, roots *x509.CertPool) []remote.Option {
	return []remote.Option{
		remote.WithTransport(newTransport(insecure, roots)),
		remote.WithUserAgent(userAgent),
		remote.WithRetryStatusCodes(retryStatusCodes...),
		remote.WithRetryPredicate(isTransient),
		remote.WithRetryBackoff(retryBackoff),
	}
}

// registryTransport enforces the insecure-registry param: go-containerregistry
// would otherwise fall back to plain HTTP for loopback and private addresses
// on its own. The committer never guesses from the host name.
type registryTransport struct {
	insecure bool
	inner    http.RoundTripper
}

// newTransport returns the HTTP transport used for every registry request.
// With insecure=false only HTTPS with certificates verified against roots
// (the system's when nil) is allowed. With insecure=true plain HTTP is
// allowed and certificates are not verified, like docker's and nerdctl's
// --insecure-registry.
func newTransport(insecure bool, roots *x509.CertPool) http.RoundTripper {
	base := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case insecure:
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // requested by insecure-registry=true
	case roots != nil:
		base.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &registryTransport{insecure: insecure, inner: base}
}

// RoundTrip implements http.RoundTripper.
func (t *registryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !t.insecure {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w (host %s)", ErrPlainHTTPRefused, req.URL.Host)
	}
	return t.inner.RoundTrip(req)
}

// LoadRootCAs returns the system's roots with the PEM certificates of every
// file in dir added (a ConfigMap's keys, mounted), or nil, for the system's
// roots alone, when dir is empty or holds no file. A file that holds no PEM
// certificate is an error naming it. Names starting with a dot (the
// ConfigMap volume's own links) are skipped.
func LoadRootCAs(dir string) (*x509.CertPool, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("registry CA directory: %w", err)
	}
	pems := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if pems["registry CA "+p], err = os.ReadFile(p); err != nil {
			return nil, fmt.Errorf("registry CA: %w", err)
		}
	}
	if len(pems) == 0 {
		return nil, nil
	}
	return registry.RootCAs(pems)
}
