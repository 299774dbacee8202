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
	"fmt"
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
	"github.com/containerd/errdefs"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
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

// TestKeepLocalForResume pushes with keep-local: the image stays unpacked
// under its tag and repository@digest, a container starts from it without a
// pull, and the oldest kept image goes when the disk bound is reached.
func TestKeepLocalForResume(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	is := e.ctrd.Client.ImageService()
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	var refs, byDigest []string
	for i := 1; i <= 2; i++ {
		p.writeBig(t, "app", "/data/big", int64(i)<<20)
		ref := fmt.Sprintf("%s/snap/%s-keep:%d", e.regA.Host, p.name, i)
		c := e.committer(p.params(t, true, "app="+ref))
		c.cfg.KeepLocal = true
		// Room for the second image alone: keeping it evicts the first.
		c.cfg.KeepLocalMaxBytes = 6 << 20
		if _, err := c.Commit(context.Background()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		pushed, _, err := c.Push(context.Background())
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		refs = append(refs, ref)
		byDigest = append(byDigest, pushed[0].Target.Repository()+"@"+pushed[0].Digest)
		for _, n := range []string{ref, byDigest[i-1]} {
			img, err := e.ctrd.Client.GetImage(ctx, n)
			if err != nil {
				t.Fatalf("kept image %s: %v", n, err)
			}
			if ok, err := img.IsUnpacked(ctx, "overlayfs"); err != nil || !ok {
				t.Errorf("kept image %s is not unpacked (%v)", n, err)
			}
			if img.Metadata().Target.Digest.String() != pushed[0].Digest {
				t.Errorf("kept image %s has manifest %s, pushed %s", n, img.Metadata().Target.Digest, pushed[0].Digest)
			}
		}
		if i == 1 {
			// A resume on this node: no pull (Run only reads local images).
			id := p.name + "-resumed"
			ctr, task, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: id, Pod: p.name + "-r", PodNamespace: "default", Name: "app", Image: ref}, nil)
			if err != nil {
				t.Fatalf("starting from the kept image: %v", err)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/data/big", task.Pid())); err != nil {
				t.Errorf("resumed container lacks the snapshot's file: %v", err)
			}
			if err := e.ctrd.DeleteContainer(ctx, ctr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range []string{refs[0], byDigest[0]} {
		if _, err := is.Get(ctx, n); !errdefs.IsNotFound(err) {
			t.Errorf("oldest kept image %s not evicted beyond the bound (err %v)", n, err)
		}
	}
	for _, n := range []string{refs[1], byDigest[1]} {
		if _, err := is.Get(ctx, n); err != nil {
			t.Errorf("newest kept image %s: %v", n, err)
		}
		_ = is.Delete(ctx, n)
	}
}
