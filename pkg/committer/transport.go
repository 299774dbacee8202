package committer

import (
	"crypto/tls"
	"fmt"
	"net/http"
)

// ErrPlainHTTPRefused is wrapped by errors for plain-HTTP registry requests
// made while insecure-registry is false.
var ErrPlainHTTPRefused = fmt.Errorf("plain HTTP to a registry is refused because insecure-registry is \"false\"")

// registryTransport enforces the insecure-registry param: go-containerregistry
// would otherwise fall back to plain HTTP for loopback and private addresses
// on its own. The committer never guesses from the host name.
type registryTransport struct {
	insecure bool
	inner    http.RoundTripper
}

// NewRegistryTransport returns the HTTP transport used for every registry
// request. With insecure=false only HTTPS with verified certificates is
// allowed. With insecure=true plain HTTP is allowed and certificates are not
// verified, like docker's and nerdctl's --insecure-registry.
func NewRegistryTransport(insecure bool) http.RoundTripper {
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
