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
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestReceived(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "", want: 0},
		{in: "0-0", want: 0},
		{in: "0-1", want: 2},
		{in: "0-2097151", want: 2 << 20},
		{in: "bytes=0-99", want: 100},
		{in: "5-9", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "0--3", wantErr: true},
		{in: "garbage", wantErr: true},
	} {
		got, err := received(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("received(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRefusesChunks(t *testing.T) {
	for status, want := range map[int]bool{
		http.StatusBadRequest:                   true,
		http.StatusMethodNotAllowed:             true,
		http.StatusRequestedRangeNotSatisfiable: true,
		http.StatusNotImplemented:               true,
		http.StatusUnauthorized:                 false,
		http.StatusForbidden:                    false,
		http.StatusNotFound:                     false,
		http.StatusInsufficientStorage:          false,
		http.StatusServiceUnavailable:           false,
	} {
		err := fmt.Errorf("wrapped: %w", &transport.Error{StatusCode: status})
		if got := refusesChunks(err); got != want {
			t.Errorf("refusesChunks(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestRedactedURL(t *testing.T) {
	u, err := url.Parse("http://user:pw@reg.example/v2/a/blobs/uploads/1?_state=secret&digest=sha256:x")
	if err != nil {
		t.Fatal(err)
	}
	got := redactedURL(u)
	if strings.Contains(got, "secret") || strings.Contains(got, "pw") || !strings.Contains(got, "/v2/a/blobs/uploads/1") {
		t.Errorf("redactedURL = %q", got)
	}
}

// TestUploadStream streams blobs of sizes around the chunk size through a
// real (go-containerregistry's) registry: each is committed under the
// digest of its bytes, which the registry then serves; a stream that
// fails part-way commits nothing.
func TestUploadStream(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/sb/stream", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 1 << 10
	u, err := NewChunked(context.Background(), repo, nil, Options{Insecure: true, ChunkSize: chunk, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{2, chunk - 1, chunk, chunk + 1, 3 * chunk, 3*chunk + 7} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			data := make([]byte, size)
			if _, err := rand.Read(data); err != nil {
				t.Fatal(err)
			}
			d, err := u.UploadStream(context.Background(), "application/vnd.test", func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(data)), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := digest.FromBytes(data); d.Digest != want || d.Size != int64(size) || d.MediaType != "application/vnd.test" {
				t.Fatalf("UploadStream = %+v, want %s of %d bytes", d, want, size)
			}
			l, err := remote.Layer(repo.Digest(d.Digest.String()))
			if err != nil {
				t.Fatal(err)
			}
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the registry serves %d bytes (%v), want the %d streamed", len(got), err, size)
			}
		})
	}
	t.Run("failing stream", func(t *testing.T) {
		broken := errors.New("disk gone")
		_, err := u.UploadStream(context.Background(), "application/vnd.test", func() (io.ReadCloser, error) {
			return io.NopCloser(io.MultiReader(bytes.NewReader(make([]byte, 2*chunk)), iotest.ErrReader(broken))), nil
		})
		if !errors.Is(err, broken) {
			t.Fatalf("UploadStream = %v, want %v", err, broken)
		}
		sent := ocispec.Descriptor{Digest: digest.FromBytes(make([]byte, 2*chunk)), Size: 2 * chunk}
		if held, err := u.exists(context.Background(), sent); err != nil || held {
			t.Fatalf("the registry holds the failed stream's bytes as a blob: %v, %v", held, err)
		}
	})
}

// TestRetryWaitsAreJittered checks that a request's retries, of the upload's
// start (retry) and of a chunk (patch), wait as retryBackoff says: longer
// each time, each up to its Jitter longer at random, so that pushes a
// registry's restart failed together do not come back together.
func TestRetryWaitsAreJittered(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodPatch} {
		t.Run(method, func(t *testing.T) {
			reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
			failures := retryBackoff.Steps - 1
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == method && strings.Contains(r.URL.Path, "/blobs/uploads/") && failures > 0 {
					failures--
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				reg.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/sb/jitter", name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			u, err := NewChunked(context.Background(), repo, nil, Options{Insecure: true, ChunkSize: 1 << 10, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			var waits []time.Duration
			u.sleep = func(_ context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			}
			data := make([]byte, 3<<10)
			if _, err := rand.Read(data); err != nil {
				t.Fatal(err)
			}
			if _, err := u.UploadStream(context.Background(), "application/vnd.test", func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(data)), nil
			}); err != nil {
				t.Fatalf("UploadStream after %d transient failures: %v", retryBackoff.Steps-1, err)
			}
			if len(waits) != retryBackoff.Steps-1 {
				t.Fatalf("waited %d times (%v), want %d", len(waits), waits, retryBackoff.Steps-1)
			}
			base, jittered := retryBackoff.Duration, 0
			for i, d := range waits {
				if limit := time.Duration(float64(base) * (1 + retryBackoff.Jitter)); d < base || d > limit {
					t.Errorf("wait %d is %v, want from %v to %v", i+1, d, base, limit)
				}
				if d != base {
					jittered++
				}
				base = time.Duration(float64(base) * retryBackoff.Factor)
			}
			if jittered == 0 {
				t.Errorf("waits %v: none jittered", waits)
			}
		})
	}
}
