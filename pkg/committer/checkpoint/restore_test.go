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

package checkpoint

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestOnLoopback(t *testing.T) {
	const d = "@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	for ref, want := range map[string]bool{
		"localhost:5000/base" + d:            true,
		"localhost/base" + d:                 true,
		"127.0.0.1:5000/base" + d:            true,
		"127.0.0.2:5000/base" + d:            true,
		"[::1]:5000/base" + d:                true,
		"docker.io/library/busybox" + d:      false,
		"10.244.0.1:5000/base" + d:           false,
		"registry.example.com/team/base" + d: false,
		"sha256:" + d[8:]:                    false, // an image ID: no registry at all
	} {
		if got := onLoopback(ref); got != want {
			t.Errorf("onLoopback(%q) = %v, want %v", ref, got, want)
		}
	}
}

// TestPullableAsRestored resolves base images on a real registry as
// containerd's restore pulls them: anonymously, plain HTTP only on loopback.
func TestPullableAsRestored(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	// The same registry, refusing anyone without credentials.
	private := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		reg.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(private.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := name.ParseReference(host+"/sandbox/base:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	missing := "sha256:" + strings.Repeat("0", 64)

	if err := pullableAsRestored(t.Context(), host+"/sandbox/base@"+d.String()); err != nil {
		t.Errorf("the base image on a loopback registry over plain HTTP: %v, want it resolved", err)
	}
	for what, ref := range map[string]string{
		"a base image the registry no longer has":      host + "/sandbox/base@" + missing,
		"a base image behind credentials":              strings.TrimPrefix(private.URL, "http://") + "/sandbox/base@" + d.String(),
		"an image ID, which names no registry to pull": d.String(),
	} {
		if err := pullableAsRestored(t.Context(), ref); err == nil {
			t.Errorf("%s (%s): resolved, want an error", what, ref)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}

	// A name that is not a loopback address, although it resolves to one, is
	// pulled over HTTPS only: a plain HTTP registry there cannot be pulled.
	hn, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.LookupHost(hn)
	if err != nil || len(addrs) == 0 || !net.ParseIP(addrs[0]).IsLoopback() || !strings.HasPrefix(host, addrs[0]+":") {
		t.Skipf("this machine's name %q does not resolve to the registry's address %s (%v %v)", hn, host, addrs, err)
	}
	_, port, _ := net.SplitHostPort(host)
	ref := net.JoinHostPort(hn, port) + "/sandbox/base@" + d.String()
	if err := pullableAsRestored(t.Context(), ref); err == nil {
		t.Errorf("%s, plain HTTP on a name that is not loopback: resolved, want an error", ref)
	} else {
		t.Logf("plain HTTP on a name that is not loopback: %v", err)
	}
}
