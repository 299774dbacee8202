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
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// startDistribution runs distribution's registry (DISTRIBUTION_BIN, built by
// make test-integration) on a free loopback port, in memory, and returns its
// host:port. Unlike go-containerregistry's registry it answers GET on an
// upload URL with the upload's Range, which resuming needs.
func startDistribution(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("DISTRIBUTION_BIN")
	if bin == "" {
		tb.Fatal("DISTRIBUTION_BIN is not set: run these tests with make test-integration")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	dir := tb.TempDir()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  inmemory: {}
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: integration-test
`, host)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return host
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			tb.Fatalf("distribution's registry on %s is not ready: %v\n%s", host, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// patchFault is what cuttingProxy does with one PATCH.
type patchFault int

const (
	passPatch patchFault = iota
	// cutKeepHalf forwards the first half of the body as a chunk of its own
	// (a registry that kept what arrived before the connection dropped),
	// then resets the client's connection.
	cutKeepHalf
	// cutDropHalf reads half of the body, forwards nothing and resets.
	cutDropHalf
	// refuseRange answers 416 to a PATCH with a Content-Range.
	refuseRange
	// insufficientStorage answers 507.
	insufficientStorage
)

// chunkPatch is one PATCH with a Content-Range as the client sent it.
type chunkPatch struct {
	start, end int64
}

// cuttingProxy forwards every request to a registry, keeping the Host header
// so the registry's upload URLs point back at the proxy, and applies fault
// to the PATCHes. It counts the PATCH body bytes the registry received.
type cuttingProxy struct {
	*httptest.Server
	host   string
	target string
	fault  func(n int, p chunkPatch) patchFault

	mu       sync.Mutex
	patches  []chunkPatch // PATCHes with a Content-Range
	streamed int          // PATCHes without one (monolithic uploads)
	// cancelled lists the statuses of the registry's answers to DELETEs
	// of upload sessions.
	cancelled []int
	// chunkBytes counts the bytes of Content-Range PATCHes the registry got.
	chunkBytes atomic.Int64
}

func newCuttingProxy(tb testing.TB, target string, fault func(n int, p chunkPatch) patchFault) *cuttingProxy {
	p := &cuttingProxy{target: target, fault: fault}
	turl := &url.URL{Scheme: "http", Host: target}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(turl)
			pr.Out.Host = pr.In.Host
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/blobs/uploads/") {
			sw := &statusWriter{ResponseWriter: w}
			rp.ServeHTTP(sw, r)
			p.mu.Lock()
			p.cancelled = append(p.cancelled, sw.status)
			p.mu.Unlock()
			return
		}
		if r.Method != http.MethodPatch {
			rp.ServeHTTP(w, r)
			return
		}
		var cp chunkPatch
		ranged := r.Header.Get("Content-Range") != ""
		if ranged {
			if _, err := fmt.Sscanf(r.Header.Get("Content-Range"), "%d-%d", &cp.start, &cp.end); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		p.mu.Lock()
		f := passPatch
		if ranged {
			p.patches = append(p.patches, cp)
			f = p.fault(len(p.patches), cp)
		} else {
			p.streamed++
		}
		p.mu.Unlock()
		switch f {
		case refuseRange:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			fmt.Fprint(w, `{"errors":[{"code":"RANGE_INVALID","message":"induced by the test"}]}`)
		case insufficientStorage:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInsufficientStorage)
			fmt.Fprint(w, `{"errors":[{"code":"UNKNOWN","message":"induced by the test"}]}`)
		case cutKeepHalf, cutDropHalf:
			half := make([]byte, r.ContentLength/2)
			if _, err := io.ReadFull(r.Body, half); err != nil {
				panic(err)
			}
			if f == cutKeepHalf {
				p.forward(tb, r, cp.start, half)
			}
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			// Linger 0: close with a TCP RST, a "connection reset by peer".
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		default:
			if ranged {
				r.Body = &countingBody{ReadCloser: r.Body, n: &p.chunkBytes}
			}
			rp.ServeHTTP(w, r)
		}
	}))
	p.host = strings.TrimPrefix(p.URL, "http://")
	tb.Cleanup(p.Close)
	return p
}

// forward sends body to the registry as the chunk starting at start of the
// upload r addresses.
func (p *cuttingProxy) forward(tb testing.TB, r *http.Request, start int64, body []byte) {
	req, err := http.NewRequest(http.MethodPatch, "http://"+p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Host = r.Host
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", start, start+int64(len(body))-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		tb.Errorf("forwarding the first %d bytes of a cut chunk: %s", len(body), resp.Status)
		return
	}
	p.chunkBytes.Add(int64(len(body)))
}

func (p *cuttingProxy) record() ([]chunkPatch, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]chunkPatch(nil), p.patches...), p.streamed
}

// statusWriter records the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// chunkedBlobBytes is the total size of the committed image's blobs that
// are uploaded in chunks of chunk bytes.
func (e *testEnv) chunkedBlobBytes(t *testing.T, m ocispec.Descriptor, chunk int64) int64 {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	raw, err := content.ReadBlob(ctx, e.ctrd.Client.ContentStore(), m)
	if err != nil {
		t.Fatal(err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, d := range append([]ocispec.Descriptor{man.Config}, man.Layers...) {
		if d.Size > chunk {
			n += d.Size
		}
	}
	return n
}

// TestPushChunkedResumes pushes a layer of several chunks to distribution's
// registry through a proxy that cuts or refuses PATCHes, and counts what the
// registry received: a cut chunk resumes from the offset the registry
// reports, not from byte 0, and the pushed layer verifies.
func TestPushChunkedResumes(t *testing.T) {
	e := requireEnv(t)
	dist := startDistribution(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	const chunk = 2 << 20
	for _, tc := range []struct {
		name string
		// ggcr: go-containerregistry's registry (crane registry serve),
		// which has no upload status, instead of distribution's.
		ggcr  bool
		fault func(n int, cp chunkPatch) patchFault
		// want is the push error; empty for success.
		want  string
		check func(t *testing.T, patches []chunkPatch, streamed int, sent, blobs int64)
		// cancelled: the failed upload session is deleted on the registry.
		cancelled bool
	}{
		{
			name: "third chunk cut mid-way, the registry keeps what arrived",
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 3 {
					return cutKeepHalf
				}
				return passPatch
			},
			check: func(t *testing.T, patches []chunkPatch, _ int, sent, blobs int64) {
				cut := patches[2]
				half := (cut.end - cut.start + 1) / 2
				if len(patches) < 4 || patches[3].start != cut.start+half {
					t.Errorf("after the cut at %d+%d the next PATCH is %+v, want it to start at %d", cut.start, half, patches[3:], cut.start+half)
				}
				if sent != blobs {
					t.Errorf("the registry received %d chunk bytes for %d bytes of blobs: %d re-sent, want 0", sent, blobs, sent-blobs)
				}
			},
		},
		{
			name: "third chunk cut mid-way, the registry drops it",
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 3 {
					return cutDropHalf
				}
				return passPatch
			},
			check: func(t *testing.T, patches []chunkPatch, _ int, sent, blobs int64) {
				cut := patches[2]
				if len(patches) < 4 || patches[3] != cut {
					t.Errorf("after the cut of %+v the next PATCH is %+v, want the same chunk again", cut, patches[3:])
				}
				if sent != blobs {
					t.Errorf("the registry received %d chunk bytes for %d bytes of blobs, want them equal", sent, blobs)
				}
				if n := len(patches); int64(n-1)*chunk < blobs || int64(n-2)*chunk >= blobs {
					t.Errorf("%d chunk PATCHes for %d bytes in chunks of %d: want one per chunk plus the one cut", n, blobs, chunk)
				}
			},
		},
		{
			name: "no upload status: a chunk cut mid-way restarts the upload",
			ggcr: true,
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 3 {
					return cutKeepHalf
				}
				return passPatch
			},
			check: func(t *testing.T, patches []chunkPatch, _ int, _, blobs int64) {
				restarts := 0
				for _, cp := range patches[1:] {
					if cp.start == 0 {
						restarts++
					}
				}
				if restarts != 1 {
					t.Errorf("chunk PATCHes %+v: %d restarts from byte 0, want 1", patches, restarts)
				}
				if last := patches[len(patches)-1]; last.end != blobs-1 {
					t.Errorf("the last chunk ends at %d, want %d", last.end, blobs-1)
				}
			},
		},
		{
			name: "registry refuses Content-Range: one upload in one request",
			fault: func(int, chunkPatch) patchFault {
				return refuseRange
			},
			check: func(t *testing.T, patches []chunkPatch, streamed int, _, _ int64) {
				if len(patches) != 1 || patches[0].start != 0 {
					t.Errorf("chunk PATCHes %+v, want only the first one, refused", patches)
				}
				if streamed == 0 {
					t.Error("no monolithic upload after the refusal")
				}
			},
		},
		{
			name: "507 is not retried",
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 2 {
					return insufficientStorage
				}
				return passPatch
			},
			want: "UNKNOWN: induced by the test",
			check: func(t *testing.T, patches []chunkPatch, _ int, _, _ int64) {
				if len(patches) != 2 {
					t.Errorf("%d chunk PATCHes, want 2 (the 507 is final)", len(patches))
				}
			},
			cancelled: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := dist
			if tc.ggcr {
				r := ctrharness.NewRegistry()
				defer r.Close()
				reg = r.Host
			}
			proxy := newCuttingProxy(t, reg, tc.fault)
			p.writeBig(t, "app", "/data/big.bin", 9<<20)
			ref := proxy.host + "/snap/" + p.name + "-chunked:1"
			c := e.committer(p.params(t, true, "app="+ref), func(cfg *committer.Config) { cfg.ChunkSize = chunk })
			res, err := c.Commit(context.Background())
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			blobs := e.chunkedBlobBytes(t, res.Images[0].Manifest, chunk)
			if blobs <= 2*chunk {
				t.Fatalf("only %d bytes in blobs above %d: the test needs several chunks", blobs, chunk)
			}
			pushed, _, err := c.Push(context.Background())
			patches, streamed := proxy.record()
			t.Logf("push error: %v; chunk PATCHes %+v; %d monolithic; registry got %d chunk bytes for %d", err, patches, streamed, proxy.chunkBytes.Load(), blobs)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("push error %v, want %q", err, tc.want)
				}
			} else {
				if err != nil {
					t.Fatalf("push: %v", err)
				}
				if got := registryDigest(t, ref); got != pushed[0].Digest {
					t.Errorf("registry holds %s, pushed %s", got, pushed[0].Digest)
				}
				assertLayerDigests(t, ref)
			}
			tc.check(t, patches, streamed, proxy.chunkBytes.Load(), blobs)
			proxy.mu.Lock()
			cancelled := proxy.cancelled
			proxy.mu.Unlock()
			if tc.cancelled && (len(cancelled) != 1 || cancelled[0] != http.StatusNoContent) {
				t.Errorf("DELETEs of the failed upload session answered %v, want one 204", cancelled)
			}
			e.assertAllRunning(t, p)
		})
	}
}

// assertLayerDigests downloads every layer of ref and checks its digest.
func assertLayerDigests(t *testing.T, ref string) {
	t.Helper()
	layers, err := remoteImage(t, ref).Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		want, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			t.Fatalf("reading layer %s: %v", want, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want.String() {
			t.Errorf("layer %s reads back as %s", want, got)
		}
	}
}

// genReader yields n pseudo-random bytes without holding them.
type genReader struct {
	n, off int64
	block  [4096]byte
}

func (g *genReader) Read(b []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), g.n-g.off)]
	for i := range b {
		pos := g.off + int64(i)
		if pos%4096 == 0 {
			sum := sha256.Sum256([]byte(fmt.Sprint(pos)))
			for j := range g.block {
				g.block[j] = sum[j%len(sum)] ^ byte(j)
			}
		}
		b[i] = g.block[pos%4096]
	}
	g.off += int64(len(b))
	return len(b), nil
}

func (g *genReader) Close() error { return nil }

// BenchmarkChunkedUploadMemory uploads a 256 MiB blob in 16 MiB chunks to
// distribution's registry through a proxy that cuts one chunk mid-way, and
// reports the committer's peak heap: bounded by the chunk, not the blob.
func BenchmarkChunkedUploadMemory(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip(skipReason)
	}
	const size = 256 << 20
	reg := startDistribution(b)
	dg := digest.Canonical.Digester()
	if _, err := io.Copy(dg.Hash(), &genReader{n: size}); err != nil {
		b.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: dg.Digest(), Size: size}
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	defer close(stop)
	b.ReportAllocs()
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		proxy := newCuttingProxy(b, reg, func(n int, _ chunkPatch) patchFault {
			if n == 5 {
				return cutKeepHalf
			}
			return passPatch
		})
		repo, err := name.NewRepository(fmt.Sprintf("%s/bench/blob%d", proxy.host, i), name.Insecure)
		if err != nil {
			b.Fatal(err)
		}
		u, err := upload.NewChunked(context.Background(), repo, nil, upload.Options{Insecure: true, Logf: func(string, ...any) {}})
		if err != nil {
			b.Fatal(err)
		}
		err = u.Upload(context.Background(), d, nil, func() (io.ReadCloser, error) { return &genReader{n: size}, nil })
		if err != nil {
			b.Fatal(err)
		}
		if sent := proxy.chunkBytes.Load(); sent != size {
			b.Fatalf("the registry received %d bytes for a blob of %d", sent, size)
		}
		proxy.Close()
	}
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	if peak.Load() > size/2 {
		b.Errorf("peak heap %d MiB for a blob of %d MiB: the upload holds more than its chunk", peak.Load()>>20, size>>20)
	}
}
