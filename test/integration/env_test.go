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
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/overlay"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// Integration tests run against a real containerd (CONTAINERD_BIN, default
// /usr/bin/containerd) and real in-process registries on 127.0.0.1. They need
// root; otherwise every test is skipped with the reason.

var (
	env        *testEnv
	skipReason string
)

type testEnv struct {
	ctrd *ctrharness.Containerd
	regA *ctrharness.Registry
	regB *ctrharness.Registry
	// dockerBase lives in regA (Docker media types), ociBase in regB (OCI).
	dockerBase string
	ociBase    string
	binOnce    sync.Once
	bin        string
	binErr     error
	tmp        string
	// copyDir receives the overlay differ's copies; empty after each test.
	copyDir string
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		skipReason = "integration tests need root (they run a private containerd and runc)"
		return m.Run()
	}
	ctrd, err := ctrharness.Start(ctrharness.Bin())
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting containerd %s: %v\n", ctrharness.Bin(), err)
		return 1
	}
	defer func() {
		if err := ctrd.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping containerd: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "integration: using %s (%s)\n", ctrd.Bin, ctrd.Version)
	e := &testEnv{ctrd: ctrd, regA: ctrharness.NewRegistry(), regB: ctrharness.NewRegistry()}
	defer e.regA.Close()
	defer e.regB.Close()
	e.tmp, err = os.MkdirTemp("", "committer-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(e.tmp)
	e.copyDir = filepath.Join(e.tmp, "copies")
	if err := os.Mkdir(e.copyDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e.dockerBase = e.regA.Host + "/base/busybox:docker"
	e.ociBase = e.regB.Host + "/base/busybox:oci"
	ctx := ctrd.Ctx(context.Background())
	for ref, oci := range map[string]bool{e.dockerBase: false, e.ociBase: true} {
		img, err := ctrharness.BusyboxImage(oci)
		if err == nil {
			err = ctrharness.PushImage(ref, img)
		}
		if err == nil {
			_, err = ctrd.Pull(ctx, ref)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "preparing base image %s: %v\n", ref, err)
			return 1
		}
	}
	env = e
	return m.Run()
}

func requireEnv(t *testing.T) *testEnv {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	return env
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// podSpec: container name -> base image.
type podContainer struct {
	name  string
	image string
}

type runningPod struct {
	name, namespace string
	uid             string
	// runID is the run ID that params and binCmd pass.
	runID string
	ctrs  map[string]client.Container
	tasks map[string]client.Task
}

// startPod runs CRI-labelled containers, plus a sandbox container and an
// exited earlier attempt of the first container, to exercise the selection.
func (e *testEnv) startPod(t *testing.T, pcs ...podContainer) *runningPod {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	p := &runningPod{name: "sb-" + randSuffix(), namespace: "default", uid: "uid-" + randSuffix(), runID: "run-" + randSuffix(),
		ctrs: map[string]client.Container{}, tasks: map[string]client.Task{}}
	cleanup := func(c client.Container) {
		t.Cleanup(func() {
			if err := e.ctrd.DeleteContainer(ctx, c); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
	}
	sb, _, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: p.name + "-sandbox", Pod: p.name, PodNamespace: p.namespace, PodUID: p.uid, Image: e.dockerBase, Sandbox: true}, nil)
	if err != nil {
		t.Fatalf("sandbox container: %v", err)
	}
	cleanup(sb)
	if len(pcs) > 0 {
		// An exited attempt with the same container name.
		old, oldTask, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: p.name + "-" + pcs[0].name + "-0", Pod: p.name, PodNamespace: p.namespace, PodUID: p.uid, Name: pcs[0].name, Image: pcs[0].image, Args: []string{"true"}}, nil)
		if err != nil {
			t.Fatalf("exited attempt: %v", err)
		}
		cleanup(old)
		ch, _ := oldTask.Wait(ctx)
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("exited attempt did not exit")
		}
	}
	for _, pc := range pcs {
		c, task, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: p.name + "-" + pc.name + "-1", Pod: p.name, PodNamespace: p.namespace, PodUID: p.uid, Name: pc.name, Image: pc.image}, nil)
		if err != nil {
			t.Fatalf("container %s: %v", pc.name, err)
		}
		cleanup(c)
		p.ctrs[pc.name], p.tasks[pc.name] = c, task
	}
	return p
}

// rootfs returns the host path of a container's root filesystem.
func (p *runningPod) rootfs(t *testing.T, container string) string {
	t.Helper()
	return fmt.Sprintf("/proc/%d/root", p.tasks[container].Pid())
}

func (p *runningPod) writeFile(t *testing.T, container, path string, data []byte) {
	t.Helper()
	full := filepath.Join(p.rootfs(t, container), path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tmpfs64 mounts a 64 MiB tmpfs on a new directory until the test ends.
func tmpfs64(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mounting a 64 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	return dir
}

// writeBig writes size bytes of pseudo-random data (compressible poorly).
func (p *runningPod) writeBig(t *testing.T, container, path string, size int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(p.rootfs(t, container), path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	_, _ = rand.Read(buf)
	for written := int64(0); written < size; written += int64(len(buf)) {
		buf[0]++ // avoid identical chunks
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *runningPod) params(t *testing.T, insecure bool, targets ...string) *task.Params {
	t.Helper()
	ins := "false"
	if insecure {
		ins = "true"
	}
	pp, err := task.ParseParams(task.RawParams{PodName: p.name, PodNamespace: p.namespace, PodUID: p.uid, RunID: p.runID, Containers: targets, InsecureRegistry: ins, Mode: task.ModeCommit})
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

// committer returns a Committer of p on the test's containerd, its Config
// set by opts.
func (e *testEnv) committer(p *task.Params, opts ...func(*committer.Config)) *testCommitter {
	cfg := committer.Config{Params: p, Log: testLogWriter{}, CopyDir: e.copyDir, LayerDir: e.copyDir}
	for _, o := range opts {
		o(&cfg)
	}
	return &testCommitter{committer.New(e.ctrd.Client, cfg), cfg, e.ctrd.Client}
}

// testCommitter is a Committer, the Config it was built with and its
// containerd client.
type testCommitter struct {
	*committer.Committer
	cfg    committer.Config
	client *client.Client
}

// testLog is the logger of the parts the tests build beside a committer.
var testLog = log.New(testLogWriter{}, "", 0)

// pod is the pod of c's snapshot, as its freezer names it.
func (c *testCommitter) pod() freeze.Pod {
	p := c.cfg.Params
	return freeze.Pod{Name: p.PodName, Namespace: p.PodNamespace, UID: p.PodUID}
}

// findLive finds the live target containers of c's pod, as its commit step
// does, in the CRI plugin's namespace.
func (c *testCommitter) findLive(ctx context.Context) ([]*freeze.Container, error) {
	frz := freeze.New(c.client, c.pod(), freeze.Options{Namespace: committer.DefaultNamespace, RunID: c.cfg.Params.RunID, Log: testLog})
	return frz.FindLive(namespaces.WithNamespace(ctx, committer.DefaultNamespace), c.cfg.Params.Targets)
}

// differ is the overlay differ c's commit step uses.
func (c *testCommitter) differ() *overlay.Differ {
	return overlay.New(c.client, c.cfg.CopyDir, c.pod().String(), testLog)
}

// records are the records c's memory snapshots leave for the push step.
func (c *testCommitter) records() checkpoint.Records {
	return checkpoint.Records{LayerDir: c.cfg.LayerDir, CheckpointDir: c.cfg.CheckpointDir}
}

// workingName is the name of the image c's commit step leaves for its push
// step.
func (c *testCommitter) workingName(t task.Target) string {
	return committer.WorkingName(t, c.cfg.Params.RunID)
}

// inPause sets committer.Config.InPause.
func inPause(hook func(context.Context, []*freeze.Container) error) func(*committer.Config) {
	return func(cfg *committer.Config) { cfg.InPause = hook }
}

type testLogWriter struct{}

func (testLogWriter) Write(b []byte) (int, error) {
	os.Stderr.Write(b)
	return len(b), nil
}

// assertAllRunning checks that no container of the pod is paused and that
// the paused-by marker is gone.
func (e *testEnv) assertAllRunning(t *testing.T, p *runningPod) {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	for n, task := range p.tasks {
		st, err := task.Status(ctx)
		if err != nil {
			t.Errorf("container %s: status: %v", n, err)
			continue
		}
		if st.Status != client.Running {
			t.Errorf("container %s is %s, want running", n, st.Status)
		}
		labels, err := p.ctrs[n].Labels(ctx)
		if err != nil {
			t.Errorf("container %s: labels: %v", n, err)
		} else if v := labels[freeze.LabelPausedBy]; v != "" {
			t.Errorf("container %s still carries %s=%s", n, freeze.LabelPausedBy, v)
		}
	}
}

// remoteImage reads an image from a loopback registry by reference.
func remoteImage(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	return img
}

// lastLayerFiles lists the entries of the top layer of a pushed image.
func lastLayerFiles(t *testing.T, ref string) map[string][]byte {
	t.Helper()
	layers, err := remoteImage(t, ref).Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(tr, 4096))
		out[strings.TrimPrefix(h.Name, "./")] = b
	}
	return out
}

func registryDigest(t *testing.T, ref string) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(r)
	if err != nil {
		t.Fatalf("HEAD %s: %v", ref, err)
	}
	return d.Digest.String()
}

// deleteBaseBlobs removes the base image layers from the content store, as
// containerd's discard_unpacked_layers does, and returns how many are absent.
func (e *testEnv) deleteBaseBlobs(t *testing.T, ref string) int {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	img, err := e.ctrd.Client.ImageService().Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cs := e.ctrd.Client.ContentStore()
	m, err := images.Manifest(ctx, cs, img.Target, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range m.Layers {
		_ = cs.Delete(ctx, l.Digest)
		if _, err := cs.Info(ctx, l.Digest); errdefs.IsNotFound(err) {
			n++
		}
	}
	return n
}

func TestCommitPushVerify(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	t.Logf("containerd %s, shims %v", e.ctrd.Version, e.ctrd.ShimBinaries())
	p.writeFile(t, "app", "/data/app.txt", []byte("app-state-1\n"))
	p.writeFile(t, "app", "/root/nested/deep.txt", []byte("deep\n"))
	if err := os.Remove(filepath.Join(p.rootfs(t, "app"), "bin/ls")); err != nil {
		t.Fatal(err)
	}
	p.writeFile(t, "sidecar", "/data/sidecar.txt", []byte("sidecar-state\n"))
	p.writeBig(t, "sidecar", "/data/big.bin", 1<<20)

	// app goes to regA (same registry as its base: cross-repo mount);
	// sidecar goes to regA too while its base is in regB (fetched from regB).
	appRef := e.regA.Host + "/snap/" + p.name + "-app:gen1"
	sideRef := e.regA.Host + "/snap/" + p.name + "-sidecar:gen1"
	params := p.params(t, true, "app="+appRef, "sidecar="+sideRef)
	c := e.committer(params)

	res, err := c.Commit(context.Background())
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	t.Logf("pause window: %s", res.PauseWindow)
	e.assertAllRunning(t, p)
	if len(res.Images) != 2 {
		t.Fatalf("got %d committed images", len(res.Images))
	}

	// The base layers are gone from containerd, like after unpack with
	// discard_unpacked_layers; the push must still complete.
	if n := e.deleteBaseBlobs(t, e.dockerBase) + e.deleteBaseBlobs(t, e.ociBase); n == 0 {
		t.Fatal("no base blob deleted")
	}
	t.Cleanup(func() {
		// Restore the base images for later tests.
		for _, ref := range []string{e.dockerBase, e.ociBase} {
			if _, err := e.ctrd.Pull(ctx, ref); err != nil {
				t.Errorf("re-pulling %s: %v", ref, err)
			}
		}
	})
	// The new layers are only in the commit step's layer files, not in
	// containerd: the push uploads them from there.
	for _, ci := range res.Images {
		b, err := os.ReadFile(layerdir.Path(e.copyDir, ci.Layer.Digest))
		if err != nil {
			t.Fatalf("layer file of %s: %v", ci.Target.Container, err)
		}
		if got := digest.FromBytes(b); got != ci.Layer.Digest {
			t.Errorf("layer file of %s has digest %s, want %s", ci.Target.Container, got, ci.Layer.Digest)
		}
		e.assertNoBlob(t, ci.Layer.Digest, "the layer of "+ci.Target.Container+" after the commit")
	}

	pushed, stats, err := c.Push(context.Background())
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	// An image not kept never enters containerd's content store.
	for _, ci := range res.Images {
		if _, err := os.Stat(layerdir.Path(e.copyDir, ci.Layer.Digest)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("layer file of %s after the push: %v", ci.Target.Container, err)
		}
		e.assertNoBlob(t, ci.Layer.Digest, "the layer of "+ci.Target.Container+" after a push without keep-local")
	}
	t.Logf("push stats: %+v", *stats)
	if stats.Remote != 2 {
		t.Errorf("expected 2 blobs taken from source repositories, got %+v", *stats)
	}
	for i, ref := range []string{appRef, sideRef} {
		if got := registryDigest(t, ref); got != pushed[i].Digest {
			t.Errorf("%s: recorded digest %s, registry holds %s", ref, pushed[i].Digest, got)
		}
		if pushed[i].Digest != res.Images[i].Manifest.Digest.String() {
			t.Errorf("%s: pushed digest %s differs from committed manifest %s", ref, pushed[i].Digest, res.Images[i].Manifest.Digest)
		}
		if n := c.workingName(params.Targets[i]); n == ref {
			t.Errorf("the commit step's image is named %s, the target's tag", n)
		} else if _, err := e.ctrd.Client.ImageService().Get(ctx, n); err == nil {
			t.Errorf("local committed image %s was not removed", n)
		}
	}
	digests := committer.FormatDigests(pushed)
	if strings.Count(digests, ",") != 1 || !strings.HasPrefix(digests, "sha256:") {
		t.Errorf("DIGESTS = %q", digests)
	}
	if want := e.regA.Host + "/snap/" + p.name + "-app@" + pushed[0].Digest; !strings.HasPrefix(committer.FormatImages(pushed), want+"\n") {
		t.Errorf("IMAGES = %q, want first line %q", committer.FormatImages(pushed), want)
	}

	files := lastLayerFiles(t, appRef)
	if string(files["data/app.txt"]) != "app-state-1\n" || string(files["root/nested/deep.txt"]) != "deep\n" {
		t.Errorf("app layer lacks the written files: %v", keys(files))
	}
	if _, ok := files["bin/.wh.ls"]; !ok {
		t.Errorf("app layer lacks the whiteout for /bin/ls: %v", keys(files))
	}
	if string(lastLayerFiles(t, sideRef)["data/sidecar.txt"]) != "sidecar-state\n" {
		t.Error("sidecar layer lacks data/sidecar.txt")
	}

	// The pushed images run again in containerd and show the files.
	for _, tc := range []struct {
		ref, script, want string
	}{
		{appRef, "cat /data/app.txt /root/nested/deep.txt; test -e /bin/ls && echo ls-present || echo ls-gone", "app-state-1\ndeep\nls-gone\n"},
		{sideRef, "cat /data/sidecar.txt; wc -c < /data/big.bin", "sidecar-state\n1048576\n"},
	} {
		if _, err := e.ctrd.Pull(ctx, tc.ref); err != nil {
			t.Fatalf("pulling %s back: %v", tc.ref, err)
		}
		code, out, err := e.ctrd.RunToCompletion(ctx, "verify-"+randSuffix(), tc.ref, "sh", "-c", tc.script)
		if err != nil || code != 0 || out != tc.want {
			t.Errorf("running %s: code=%d err=%v output=%q want %q", tc.ref, code, err, out, tc.want)
		}
		_ = e.ctrd.Client.ImageService().Delete(ctx, tc.ref)
	}
}

// assertNoBlob checks that containerd's content store does not hold d.
func (e *testEnv) assertNoBlob(t *testing.T, d digest.Digest, what string) {
	t.Helper()
	_, err := e.ctrd.Client.ContentStore().Info(e.ctrd.Ctx(context.Background()), d)
	if !errdefs.IsNotFound(err) {
		t.Errorf("%s: containerd holds blob %s (err %v), want none", what, d, err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestCommitFailureThaws(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeFile(t, "app", "/data/x", []byte("x"))
	params := p.params(t, true, "app="+e.regA.Host+"/snap/fail:1", "sidecar="+e.regA.Host+"/snap/fail-side:1")

	t.Run("failure inside the pause window", func(t *testing.T) {
		var sawPaused bool
		c := e.committer(params, inPause(func(ctx context.Context, _ []*freeze.Container) error {
			for n, task := range p.tasks {
				st, err := task.Status(ctx)
				if err != nil || st.Status != client.Paused {
					return fmt.Errorf("container %s not paused in window: %v %v", n, st.Status, err)
				}
			}
			sawPaused = true
			return errors.New("induced failure")
		}))
		_, err := c.Commit(context.Background())
		t.Logf("commit error: %v", err)
		if err == nil || !strings.Contains(err.Error(), "induced failure") || !strings.Contains(err.Error(), p.namespace+"/"+p.name) {
			t.Fatalf("want induced failure naming the pod, got %v", err)
		}
		if !sawPaused {
			t.Fatal("hook did not observe paused containers")
		}
		e.assertAllRunning(t, p)
	})

	t.Run("snapshot removed under a container", func(t *testing.T) {
		// A target whose diff fails for real: its snapshot key points to a
		// snapshot that no longer exists by the time the diff runs. The
		// walking differ reads the key in the pause (the overlay differ
		// reads the snapshot's directories before it).
		// ctx is in the containerd namespace of the commit.
		c := e.committer(params, func(cfg *committer.Config) { cfg.WalkingDiffer = true }, inPause(func(ctx context.Context, live []*freeze.Container) error {
			info, err := p.ctrs["sidecar"].Info(ctx)
			if err != nil {
				return err
			}
			// Point the container at a missing snapshot for the diff only.
			for _, l := range live {
				if l.Target.Container == "sidecar" {
					l.Info.SnapshotKey = info.SnapshotKey + "-missing"
				}
			}
			return nil
		}))
		_, err := c.Commit(context.Background())
		t.Logf("commit error: %v", err)
		if err == nil || !strings.Contains(err.Error(), `container "sidecar"`) || !strings.Contains(err.Error(), "diffing rootfs") {
			t.Fatalf("want a diff error naming container sidecar, got %v", err)
		}
		e.assertAllRunning(t, p)
	})

	t.Run("missing container fails before pausing", func(t *testing.T) {
		bad := p.params(t, true, "app="+e.regA.Host+"/snap/fail:1", "ghost="+e.regA.Host+"/snap/ghost:1")
		c := e.committer(bad, inPause(func(context.Context, []*freeze.Container) error {
			t.Error("paused although a container is missing")
			return nil
		}))
		_, err := c.Commit(context.Background())
		t.Logf("commit error: %v", err)
		if err == nil || !strings.Contains(err.Error(), `container "ghost"`) || !strings.Contains(err.Error(), "/snap/ghost:1") {
			t.Fatalf("want error naming container ghost and its image, got %v", err)
		}
		e.assertAllRunning(t, p)
	})
}

func TestPushFailureThaws(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	p.writeFile(t, "app", "/data/x", []byte("x"))

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "induced", http.StatusInternalServerError)
	}))
	defer broken.Close()
	// registryError answers the version check, then fails requests as a
	// registry does: a status and an OCI error body. With missingBlobs, blob
	// checks answer 404 so that the failure comes from the upload itself.
	registryError := func(status int, code, message string, missingBlobs bool) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				return
			}
			if missingBlobs && r.Method == http.MethodHead {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, message)
		}))
	}
	unauthorized := registryError(http.StatusUnauthorized, "UNAUTHORIZED", "authentication required", false)
	defer unauthorized.Close()
	denied := registryError(http.StatusForbidden, "DENIED", "requested access to the resource is denied", false)
	defer denied.Close()
	full := registryError(http.StatusInsufficientStorage, "UNKNOWN", "storage quota exceeded", true)
	defer full.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedHost := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()

	for _, tc := range []struct {
		name     string
		ref      string
		insecure bool
		want     string
	}{
		{"registry answers 500", strings.TrimPrefix(broken.URL, "http://") + "/snap/app:1", true, "500"},
		{"registry rejects credentials (401)", strings.TrimPrefix(unauthorized.URL, "http://") + "/snap/app:1", true, "401 Unauthorized"},
		{"registry denies access (403)", strings.TrimPrefix(denied.URL, "http://") + "/snap/app:1", true, "403 Forbidden"},
		{"registry is full", strings.TrimPrefix(full.URL, "http://") + "/snap/app:1", true, "storage quota exceeded"},
		{"closed port", closedHost + "/snap/app:1", true, "connection refused"},
		{"plain HTTP without insecure-registry", e.regA.Host + "/snap/app:1", false, "insecure-registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.committer(p.params(t, tc.insecure, "app="+tc.ref))
			if _, err := c.Commit(context.Background()); err != nil {
				t.Fatalf("commit: %v", err)
			}
			e.assertAllRunning(t, p)
			_, _, err := c.Push(context.Background())
			if err == nil {
				t.Fatal("push succeeded")
			}
			t.Logf("push error: %v", err)
			for _, w := range []string{tc.want, `container "app"`, tc.ref, p.namespace + "/" + p.name} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("push error %q lacks %q", err, w)
				}
			}
			e.assertAllRunning(t, p)
			// A failed push removes the committed image (its content goes
			// with it); a retry commits again.
			working := c.workingName(c.cfg.Params.Targets[0])
			if _, err := e.ctrd.Client.ImageService().Get(e.ctrd.Ctx(context.Background()), working); !errdefs.IsNotFound(err) {
				t.Errorf("committed image %s still in containerd after a failed push (err %v)", working, err)
			}
		})
	}
}

// sideRef names a sidecar's image beside a container's: one repository per
// container, the same tag.
func sideRef(ref string) string {
	i := strings.LastIndex(ref, ":")
	return ref[:i] + "-side" + ref[i:]
}
