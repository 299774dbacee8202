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

package committer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
)

// containerdState lists what a commit can add to containerd: image names,
// content blobs, overlayfs snapshots and leases, after a synchronous garbage
// collection; and the copies of upper directories it left.
func (e *testEnv) containerdState(t *testing.T) map[string][]string {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	ls := e.ctrd.Client.LeasesService()
	l, err := ls.Create(ctx, leases.WithRandomID())
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil {
		t.Fatal(err)
	}
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
	all, err := ls.List(ctx)
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
	c := e.committer(p.params(t, true, "app="+host+"/snap/clean:1", "sidecar="+host+"/snap/clean-side:1"))
	c.cfg.KeepLocal = true
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, _, err := c.Push(context.Background()); err == nil {
		t.Fatal("push to a registry answering 500 succeeded")
	}
	e.assertAllRunning(t, p)
	e.assertSameState(t, before)
}
