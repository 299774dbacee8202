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
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// userAgent is the User-Agent of every registry request.
const userAgent = "sandbox-snapshot-operator-committer"

// ErrPlainHTTPRefused is wrapped by errors for plain-HTTP registry requests
// made while insecure-registry is false.
var ErrPlainHTTPRefused = fmt.Errorf("plain HTTP to a registry is refused because insecure-registry is \"false\"")

// RemoteOptions returns the go-containerregistry options every registry
// request takes: the transport of newTransport(insecure), the user agent
// and the retry policy.
func RemoteOptions(insecure bool) []remote.Option {
	return []remote.Option{
		remote.WithTransport(newTransport(insecure)),
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
// With insecure=false only HTTPS with verified certificates is allowed. With
// insecure=true plain HTTP is allowed and certificates are not verified, like
// docker's and nerdctl's --insecure-registry.
func newTransport(insecure bool) http.RoundTripper {
	base := http.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // requested by insecure-registry=true
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
