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

package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// ListenAndServe serves h on addr (port 0: any free one) until the test
// ends, and returns the host:port it listens on.
func ListenAndServe(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// RefuseDeletes passes every request but DELETE to the registry h, and
// refuses those as distribution does unless REGISTRY_STORAGE_DELETE_ENABLED
// is set.
func RefuseDeletes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprint(w, `{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// PinnedDigests returns each container's image of a snapshot as
// <repository>@<digest>, the name a node keeps it under.
func PinnedDigests(t *testing.T, s *v1alpha1.SandboxSnapshot) []name.Digest {
	t.Helper()
	var out []name.Digest
	for _, cs := range s.Status.Containers {
		ref, err := name.ParseReference(cs.ImageURI, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ref.Context().Digest(cs.ImageDigest))
	}
	return out
}

// ManifestHeld reports whether the registry holds the manifest ref.
func ManifestHeld(ctx context.Context, t *testing.T, ref name.Digest) bool {
	t.Helper()
	_, err := remote.Head(ref, remote.WithContext(ctx))
	switch {
	case RegistryNotFound(err):
		return false
	case err != nil:
		t.Fatalf("looking up %s: %v", ref, err)
	}
	return true
}

// RegistryNotFound reports whether err is a registry's answer 404.
func RegistryNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}
