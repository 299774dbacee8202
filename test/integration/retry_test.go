//go:build integration

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

package integration

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// faultyRegistry is go-containerregistry's registry behind a wrapper that
// counts every request by kind and lets fault answer some of them itself.
type faultyRegistry struct {
	*httptest.Server
	host string
	// fault returns the status to answer instead of the registry (0 to pass
	// the request on) or reset to cut the connection; seen counts this kind
	// of request, this one included.
	fault func(kind string, seen int) (status int, code string, reset bool)

	mu       sync.Mutex
	counts   map[string]int
	injected int
}

func newFaultyRegistry(fault func(kind string, seen int) (int, string, bool)) *faultyRegistry {
	f := &faultyRegistry{fault: fault, counts: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			reg.ServeHTTP(w, r)
			return
		}
		kind := requestKind(r)
		f.mu.Lock()
		f.counts[kind]++
		status, code, reset := f.fault(kind, f.counts[kind])
		if status != 0 || reset {
			f.injected++
		}
		f.mu.Unlock()
		switch {
		case reset:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			// Linger 0: close with a TCP RST, a "connection reset by peer".
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		case status != 0:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"errors":[{"code":%q,"message":"induced by the test"}]}`, code)
		default:
			reg.ServeHTTP(w, r)
		}
	}))
	f.host = strings.TrimPrefix(f.URL, "http://")
	return f
}

// requestKind is the method and the path below the repository, with blob
// upload session IDs left out: "HEAD /blobs/sha256:…", "POST /blobs/uploads/",
// "PATCH /blobs/uploads/", "PUT /manifests/1".
func requestKind(r *http.Request) string {
	p := r.URL.Path
	for _, sep := range []string{"/blobs/", "/manifests/"} {
		if i := strings.LastIndex(p, sep); i >= 0 {
			p = p[i:]
			break
		}
	}
	if strings.HasPrefix(p, "/blobs/uploads/") {
		p = "/blobs/uploads/"
	}
	return r.Method + " " + p
}

func (f *faultyRegistry) snapshot() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.counts {
		out[k] = v
	}
	return out, f.injected
}

// TestPushRetries pushes through registries that fail in various ways and
// counts the requests: transient failures are retried inside the push until
// it succeeds, permanent ones are sent exactly once.
func TestPushRetries(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	for _, tc := range []struct {
		name  string
		fault func(kind string, seen int) (int, string, bool)
		// ok: the push must succeed; otherwise fail with want.
		ok    bool
		want  string
		check func(t *testing.T, counts map[string]int)
	}{
		{
			name: "503 twice for each blob check and manifest request",
			fault: func(kind string, seen int) (int, string, bool) {
				if (strings.HasPrefix(kind, "HEAD /blobs/") || strings.Contains(kind, " /manifests/")) && seen <= 2 {
					return http.StatusServiceUnavailable, "UNAVAILABLE", false
				}
				return 0, "", false
			},
			ok: true,
			check: func(t *testing.T, counts map[string]int) {
				for k, n := range counts {
					if (strings.HasPrefix(k, "HEAD /blobs/") || strings.Contains(k, " /manifests/")) && n != 3 {
						t.Errorf("%s: %d requests, want the two 503s and one retry", k, n)
					}
				}
				if counts["PUT /manifests/1"] != 3 {
					t.Errorf("the manifest was put %d times, want 3", counts["PUT /manifests/1"])
				}
			},
		},
		{
			// Whichever requests come first, no blob or manifest sees more
			// failures than the policy's attempts allow.
			name: "503 for the first three uploads requests",
			fault: func(kind string, seen int) (int, string, bool) {
				if strings.HasPrefix(kind, "POST /blobs/uploads/") || strings.HasPrefix(kind, "PATCH /blobs/uploads/") || strings.HasPrefix(kind, "PUT /blobs/uploads/") {
					if seen <= 3 {
						return http.StatusServiceUnavailable, "UNAVAILABLE", false
					}
				}
				return 0, "", false
			},
			ok: true,
			check: func(t *testing.T, counts map[string]int) {
				if n := counts["POST /blobs/uploads/"]; n < 4 {
					t.Errorf("POST /blobs/uploads/: %d requests, want the three 503s and retries", n)
				}
			},
		},
		{
			name: "connection reset on the first manifest put",
			fault: func(kind string, seen int) (int, string, bool) {
				return 0, "", strings.HasPrefix(kind, "PUT /manifests/") && seen == 1
			},
			ok: true,
			check: func(t *testing.T, counts map[string]int) {
				if n := counts["PUT /manifests/1"]; n != 2 {
					t.Errorf("PUT /manifests/1: %d requests, want 2 (the reset and one retry)", n)
				}
			},
		},
		{
			name: "401 is not retried",
			fault: func(string, int) (int, string, bool) {
				return http.StatusUnauthorized, "UNAUTHORIZED", false
			},
			want: "401 Unauthorized",
			check: func(t *testing.T, counts map[string]int) {
				for k, n := range counts {
					if n != 1 {
						t.Errorf("%s: %d requests, want 1", k, n)
					}
				}
			},
		},
		{
			name: "404 NAME_UNKNOWN is not retried",
			fault: func(kind string, _ int) (int, string, bool) {
				if kind == "POST /blobs/uploads/" {
					return http.StatusNotFound, "NAME_UNKNOWN", false
				}
				return 0, "", false
			},
			want: "NAME_UNKNOWN",
			check: func(t *testing.T, counts map[string]int) {
				heads := 0
				for k, n := range counts {
					if strings.HasPrefix(k, "HEAD /blobs/") {
						heads++
						if n != 1 {
							t.Errorf("%s: %d requests, want 1", k, n)
						}
					}
				}
				if n := counts["POST /blobs/uploads/"]; n != heads || n == 0 {
					t.Errorf("POST /blobs/uploads/: %d requests for %d blobs, want one each", n, heads)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newFaultyRegistry(tc.fault)
			defer reg.Close()
			state := "retry-" + randSuffix() + "\n"
			p.writeFile(t, "app", "/data/retry.txt", []byte(state))
			ref := reg.host + "/snap/" + p.name + "-retry:1"
			c := e.committer(p.params(t, true, "app="+ref))
			if _, err := c.Commit(context.Background()); err != nil {
				t.Fatalf("commit: %v", err)
			}
			pushed, _, err := c.Push(context.Background())
			counts, injected := reg.snapshot()
			t.Logf("push error: %v; %d injected failures; requests: %v", err, injected, counts)
			if injected == 0 {
				t.Fatal("no failure was injected")
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("push: %v", err)
				}
				if got := registryDigest(t, ref); got != pushed[0].Digest {
					t.Errorf("registry holds %s, pushed %s", got, pushed[0].Digest)
				}
				if got := string(lastLayerFiles(t, ref)["data/retry.txt"]); got != state {
					t.Errorf("pushed layer holds %q, want %q", got, state)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("push error %v, want %q", err, tc.want)
				}
				_ = e.ctrd.Client.ImageService().Delete(e.ctrd.Ctx(context.Background()), ref)
			}
			tc.check(t, counts)
			e.assertAllRunning(t, p)
		})
	}
}
