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
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// containerdState lists what a commit can add to containerd: image names,
// content blobs, overlayfs snapshots and leases, after a synchronous garbage
// collection; and the copies of upper directories it left.
func (e *testEnv) containerdState(t *testing.T) map[string][]string {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	e.collectGarbage(t)
	st := map[string][]string{}
	imgs, err := e.ctrd.Client.ImageService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range imgs {
		st["images"] = append(st["images"], i.Name)
	}
	if err := e.ctrd.Client.ContentStore().Walk(ctx, func(i content.Info) error {
		st["content"] = append(st["content"], i.Digest.String())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrd.Client.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		st["snapshots"] = append(st["snapshots"], i.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all, err := e.ctrd.Client.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		st["leases"] = append(st["leases"], l.ID)
	}
	copies, err := os.ReadDir(e.copyDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range copies {
		st["copies"] = append(st["copies"], c.Name())
	}
	for _, v := range st {
		sort.Strings(v)
	}
	return st
}

func (e *testEnv) assertSameState(t *testing.T, before map[string][]string) {
	t.Helper()
	after := e.containerdState(t)
	for _, k := range []string{"images", "content", "snapshots", "leases", "copies"} {
		if strings.Join(before[k], "\n") != strings.Join(after[k], "\n") {
			t.Errorf("%s changed:\n  before %v\n  after  %v", k, before[k], after[k])
		}
	}
}

// TestMaxPauseExceededThawsAndFails runs the commit step with a pause bound
// no diff can meet: it exits 1 with an ERROR naming max-pause, every
// container runs, and containerd holds nothing new.
func TestMaxPauseExceededThawsAndFails(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeBig(t, "app", "/data/big", 8<<20)
	before := e.containerdState(t)
	results := t.TempDir()
	cmd, out := e.binCmd(t, p, "commit", "commit", "true", "", results)
	cmd.Args = append(cmd.Args, "--max-pause=1ms", "app="+e.regA.Host+"/snap/maxpause:1", "sidecar="+e.regA.Host+"/snap/maxpause-side:1")
	err := cmd.Run()
	t.Logf("committer output:\n%s", out)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("want exit code 1, got %v", err)
	}
	if msg := readResult(t, results, "ERROR"); !strings.Contains(msg, "max-pause 1ms") || !strings.Contains(msg, "thawed") {
		t.Errorf("ERROR result %q does not name the max-pause bound and the thaw", msg)
	}
	e.assertAllRunning(t, p)
	e.assertSameState(t, before)
}

// TestFailedPushLeavesNothing commits, fails the push, and checks that
// containerd holds exactly what it held before the commit.
func TestFailedPushLeavesNothing(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeBig(t, "app", "/data/big", 4<<20)
	p.writeFile(t, "sidecar", "/data/x", []byte("x"))
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "induced", http.StatusInternalServerError)
	}))
	defer broken.Close()
	host := strings.TrimPrefix(broken.URL, "http://")
	before := e.containerdState(t)
	c := e.committer(p.params(t, true, "app="+host+"/snap/clean:1", "sidecar="+host+"/snap/clean-side:1"), func(cfg *committer.Config) { cfg.Params.KeepLocal = true })
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, _, err := c.Push(context.Background()); err == nil {
		t.Fatal("push to a registry answering 500 succeeded")
	}
	e.assertAllRunning(t, p)
	e.assertSameState(t, before)
}

// TestFailedPushTakesBack pushes a pod's app, sidecar and worker to a
// registry that refuses the sidecar's manifest once the app's is tagged, and
// holds the worker's blob uploads until the client gives up. The push fails
// naming the refusal and waits for the worker's uploads, which it cancels:
// none outlives it, and no request arrives once it has returned. The app's
// image is left under no tag; where the registry refuses deletes, the
// failure names it, by digest, as left.
func TestFailedPushTakesBack(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase}, podContainer{"worker", e.dockerBase})
	for _, ctr := range []string{"app", "sidecar", "worker"} {
		p.writeFile(t, ctr, "/data/x", []byte(ctr))
	}
	for _, refuseDeletes := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuseDeletes=%v", refuseDeletes), func(t *testing.T) {
			reg := newTakeBackRegistry(refuseDeletes)
			defer reg.Close()
			app := reg.host + "/snap/app:1"
			c := e.committer(p.params(t, true, "app="+app, "sidecar="+reg.host+"/snap/sidecar:1", "worker="+reg.host+"/snap/worker:1"))
			if _, err := c.Commit(context.Background()); err != nil {
				t.Fatalf("commit: %v", err)
			}
			_, _, err := c.Push(context.Background())
			returned := reg.requestCount()
			t.Logf("push error: %v", err)
			if err == nil || !strings.Contains(err.Error(), "refused by the test") || !strings.Contains(err.Error(), `container "sidecar"`) {
				t.Fatalf("push error %v does not name the sidecar's refused manifest", err)
			}
			time.Sleep(2 * time.Second) // a grace period for requests still on their way
			if n := reg.requestCount(); n != returned {
				t.Errorf("the registry received %d requests after the push returned", n-returned)
			}
			held, timedOut := reg.heldUploads()
			t.Logf("the registry held %d of the worker's uploads", held)
			if timedOut > 0 {
				t.Errorf("%d of the worker's held uploads went on until the registry gave up", timedOut)
			}
			ref, _ := name.NewTag(app, name.Insecure)
			tags, lerr := remote.List(ref.Context())
			desc, herr := remote.Head(ref)
			if !refuseDeletes {
				if lerr == nil && len(tags) > 0 || herr == nil {
					t.Errorf("the app's image is still tagged after the failed push: tags %q (%v), HEAD %s: %v", tags, lerr, app, herr)
				}
				return
			}
			if herr != nil {
				t.Fatalf("HEAD %s on a registry that refuses deletes: %v", app, herr)
			}
			if left := ref.Context().Digest(desc.Digest.String()).String(); !strings.Contains(err.Error(), left) {
				t.Errorf("push error %v does not name %s as left in the registry", err, left)
			}
			for _, other := range []string{"/snap/sidecar@", "/snap/worker@"} {
				if strings.Contains(err.Error(), other) {
					t.Errorf("push error %v names an image the registry never held (%s)", err, other)
				}
			}
		})
	}
}

// takeBackRegistry is go-containerregistry's registry behind a handler that
// counts requests, refuses snap/sidecar's manifests once snap/app's is
// tagged, holds snap/worker's blob uploads until the client gives up (or a
// minute passes), and with refuseDeletes answers every DELETE as
// distribution does with deletion turned off.
type takeBackRegistry struct {
	*httptest.Server
	host string

	mu                       sync.Mutex
	requests, held, timedOut int
}

func newTakeBackRegistry(refuseDeletes bool) *takeBackRegistry {
	f := &takeBackRegistry{}
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	appTagged := make(chan struct{})
	var tagged sync.Once
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		path := r.URL.Path
		switch {
		case r.Method == http.MethodPut && strings.HasPrefix(path, "/v2/snap/sidecar/manifests/"):
			select {
			case <-appTagged:
			case <-time.After(time.Minute):
			}
			answerError(w, http.StatusBadRequest, "MANIFEST_INVALID", "manifest refused by the test")
			return
		case (r.Method == http.MethodPatch || r.Method == http.MethodPut) && strings.HasPrefix(path, "/v2/snap/worker/blobs/uploads/"):
			// With the body read, the server sees the client go.
			_, _ = io.Copy(io.Discard, r.Body)
			f.mu.Lock()
			f.held++
			f.mu.Unlock()
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
				f.mu.Lock()
				f.timedOut++
				f.mu.Unlock()
				answerError(w, http.StatusBadRequest, "BLOB_UPLOAD_INVALID", "held by the test")
			}
			return
		case refuseDeletes && r.Method == http.MethodDelete:
			answerError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "The operation is unsupported.")
			return
		}
		reg.ServeHTTP(w, r)
		if r.Method == http.MethodPut && strings.HasPrefix(path, "/v2/snap/app/manifests/") {
			tagged.Do(func() { close(appTagged) })
		}
	}))
	f.host = strings.TrimPrefix(f.URL, "http://")
	return f
}

// answerError answers as a registry does: a status and an OCI error body.
func answerError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, message)
}

// requestCount returns how many requests the registry received.
func (f *takeBackRegistry) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// heldUploads returns how many of snap/worker's uploads were held, and how
// many of those the client did not give up.
func (f *takeBackRegistry) heldUploads() (held, timedOut int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held, f.timedOut
}

// TestStopLeavesTheShimSocketFolder: stopping a containerd removes nothing
// outside its own directory. Every containerd's shims bind their sockets in
// /run/containerd/s and make it when it is absent; a Stop that removed it
// when it was empty could do so between another shim's making it and binding
// there ("bind: no such file or directory"). test/test-integration.sh gives
// each run a /run/containerd of its own, so the folder holds no other run's
// sockets.
func TestStopLeavesTheShimSocketFolder(t *testing.T) {
	requireEnv(t)
	const dir = "/run/containerd/s"
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	// A shim removes its socket just after its shutdown call returns.
	var left []os.DirEntry
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if left, err = os.ReadDir(dir); err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("%s holds %d sockets before the test: a shim outlived its test, or the run shares the folder (run it through test/test-integration.sh)", dir, len(left))
	}
	ctrd, err := ctrharness.Start(ctrharness.Bin())
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrd.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("after Stop: %v", err)
	}
}
