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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// criuDir is where test/test-integration.sh put CRIU 4
// (test/cluster/criu-build.sh).
func criuDir(t *testing.T) string {
	d := os.Getenv("CRIU_DIR")
	if d == "" {
		t.Fatal("CRIU_DIR is not set: run the integration tier with test/test-integration.sh, which builds CRIU")
	}
	return d
}

// startCRI starts a containerd of this run's version with its CRI plugin
// on, pulling from regB, with the directories in path on its PATH.
func (e *testEnv) startCRI(t *testing.T, path ...string) *ctrharness.Containerd {
	t.Helper()
	return e.startCRIWith(t, ctrharness.CRIOptions{Path: path})
}

// startCRIWith is startCRI with o's path and settings.
func (e *testEnv) startCRIWith(t *testing.T, o ctrharness.CRIOptions) *ctrharness.Containerd {
	t.Helper()
	sandboxImage := e.regB.Host + "/base/pause:sleep"
	img, err := ctrharness.BusyboxImage(true)
	if err == nil {
		cf, cerr := img.ConfigFile()
		if err = cerr; err == nil {
			cf = cf.DeepCopy()
			cf.Config.Cmd = []string{"sleep", "2147483647"}
			if img, err = mutate.ConfigFile(img, cf); err == nil {
				err = ctrharness.PushImage(sandboxImage, img)
			}
		}
	}
	if err != nil {
		t.Fatalf("pushing the pod sandbox image: %v", err)
	}
	o.SandboxImage, o.Registry = sandboxImage, e.regB.Host
	cri, err := ctrharness.StartCRI(ctrharness.Bin(), o)
	if err != nil {
		t.Fatalf("starting containerd with CRI: %v", err)
	}
	t.Cleanup(func() {
		if err := cri.Stop(); err != nil {
			t.Logf("stopping containerd: %v", err)
		}
	})
	return cri
}

// checkpoints reports whether cri is a containerd whose CRI restores
// checkpoints (2.x); the committer refuses 1.x before freezing anything.
func checkpoints(cri *ctrharness.Containerd) bool {
	return !strings.HasPrefix(cri.Version, "containerd github.com/containerd/containerd 1.")
}

// freePort returns a loopback TCP port nothing listens on.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// hibernating runs, in one shell: a web server listening on port, and a
// counter held only in a shell variable, written with a random run mark
// through one open file descriptor (no append), ten times a second. A
// process that restarted would draw a new mark and truncate the file; one
// restored with the wrong offset would overwrite earlier lines.
func hibernating(port int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`mkdir -p /tmp/www && echo pong >/tmp/www/ping
busybox httpd -f -p 127.0.0.1:%d -h /tmp/www &
mark=$(head -c 16 /dev/urandom | sha256sum | head -c 16)
exec 3>/tmp/counter
i=0
while :; do i=$((i+1)); echo "$mark $i" >&3; sleep 0.1; done`, port)}
}

// counterLines reads /tmp/counter of container id: its mark, and its
// counts, which must be 1, 2, 3, ... under one mark.
func counterLines(t *testing.T, ctx context.Context, cri *ctrharness.Containerd, id string) (string, int) {
	t.Helper()
	out, err := cri.ExecSync(ctx, id, "cat", "/tmp/counter")
	if err != nil {
		t.Fatalf("reading the counter: %v", err)
	}
	return parseCounter(t, out)
}

// waitCounting waits up to a minute until the counter of container id,
// which may not have started it yet, has at least lines lines, and returns
// its mark.
func waitCounting(t *testing.T, ctx context.Context, cri *ctrharness.Containerd, id string, lines int) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, err := cri.ExecSync(ctx, id, "cat", "/tmp/counter")
		if err == nil && strings.TrimSpace(out) != "" {
			if mark, n := parseCounter(t, out); n >= lines {
				return mark
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s did not count to %d within a minute: %v", id, lines, err)
		}
	}
}

// parseCounter reads the lines of a counter file: its mark, and how many,
// which must count 1, 2, 3, ... under that one mark.
func parseCounter(t *testing.T, out string) (string, int) {
	t.Helper()
	mark, n := "", 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m, count, _ := strings.Cut(line, " ")
		if mark == "" {
			mark = m
		}
		if m != mark || count != strconv.Itoa(n+1) {
			t.Fatalf("counter line %d is %q after mark %s: the counter restarted or the file offset moved:\n%s", n+1, line, mark, out)
		}
		n++
	}
	return mark, n
}

// countsOn fails t unless the counter of container id goes on, when, within
// 10 seconds (a loaded machine may starve it for a while): the container is
// neither frozen nor stopped.
func countsOn(t *testing.T, ctx context.Context, cri *ctrharness.Containerd, id, when string) {
	t.Helper()
	_, n1 := counterLines(t, ctx, cri, id)
	n2 := n1
	for deadline := time.Now().Add(10 * time.Second); n2 <= n1 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		_, n2 = counterLines(t, ctx, cri, id)
	}
	if n2 <= n1 {
		t.Fatalf("the counter stands at %d %s: the container is frozen or stopped", n2, when)
	}
}

func ping(port int) (string, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ping", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// checkpointer returns a Committer of container app of pod p, pushing to
// target, which may be a repository anyone may pull from, its Config set by
// opts.
func (e *testEnv) checkpointer(t *testing.T, cri *ctrharness.Containerd, p *ctrharness.Pod, target string, opts ...func(*committer.Config)) *testCommitter {
	t.Helper()
	tgt, err := task.ParseTarget("app="+target, true)
	if err != nil {
		t.Fatal(err)
	}
	md := p.Config.Metadata
	cfg := committer.Config{
		// The test's registries let anyone on this host pull.
		Params: &task.Params{PodName: md.Name, PodNamespace: md.Namespace, PodUID: md.Uid, RunID: "run-" + randSuffix(),
			Targets: []task.Target{tgt}, Insecure: true, AllowAnonymousPull: true},
		CheckpointDir: t.TempDir(),
		LayerDir:      t.TempDir(),
		Log:           testLogWriter{},
	}
	for _, o := range opts {
		o(&cfg)
	}
	return &testCommitter{committer.New(cri.Client, cfg), cfg, cri.Client}
}

// TestCheckpointRestore takes a memory snapshot of a running container
// (CRIU's dump through containerd's task API, in the archive layout of the
// CRI's CheckpointContainer), pushes it, deletes the pod, and restores a new
// pod's container from the pushed image through containerd's CRI, as
// kubelet does for a pod whose image is a checkpoint: the processes go on,
// and the filesystem change is back. It does so hibernateCycles times, each
// cycle checkpointing the container the last one restored, as a sandbox
// paused and resumed again and again is. The checkpoint's layer is zstd,
// or a plain tar when its content does not compress (here a file of random
// bytes). On containerd 1.x, whose CRI cannot restore, the snapshot fails
// as unsupported and the container runs on.
func TestCheckpointRestore(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	for _, tc := range []struct {
		name      string
		noiseMiB  int // random bytes written to /noise before the counter starts
		layerType string
	}{
		{"compressible", 0, ocispec.MediaTypeImageLayerZstd},
		{"incompressible", 16, ocispec.MediaTypeImageLayer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkpointRestore(t, e, cri, tc.noiseMiB, tc.layerType)
		})
	}
}

// hibernateCycles is how many times TestCheckpointRestore checkpoints and
// restores one sandbox.
const hibernateCycles = 3

// checkpointRestore is TestCheckpointRestore for a container that first
// writes noiseMiB MiB of random bytes to /noise; its checkpoints' layers
// must be of layerType.
func checkpointRestore(t *testing.T, e *testEnv, cri *ctrharness.Containerd, noiseMiB int, layerType string) {
	ctx := context.Background()
	port := freePort(t)
	name := "sb-" + randSuffix()
	pod, err := cri.RunPod(ctx, name, "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	script := hibernating(port)
	script[len(script)-1] = fmt.Sprintf("head -c %d /dev/urandom >/noise\n", noiseMiB<<20) + script[len(script)-1]
	id, err := cri.StartContainer(ctx, pod, "app", e.ociBase, script...)
	if err != nil {
		t.Fatal(err)
	}
	mark := waitCounting(t, ctx, cri, id, 10)
	if got, err := ping(port); err != nil || got != "pong" {
		t.Fatalf("before the checkpoint the server answers %q, %v", got, err)
	}
	noise, err := cri.ExecSync(ctx, id, "sha256sum", "/noise")
	if err != nil {
		t.Fatal(err)
	}
	baseDigest, err := remoteImage(t, e.ociBase).Digest()
	if err != nil {
		t.Fatal(err)
	}
	for cycle := 1; cycle <= hibernateCycles; cycle++ {
		// Each cycle changes the filesystem of the container it checkpoints,
		// which, after the first, is a restored one.
		if _, err := cri.ExecSync(ctx, id, "sh", "-c", fmt.Sprintf("echo %d >/cycle-%d", cycle, cycle)); err != nil {
			t.Fatal(err)
		}
		target := fmt.Sprintf("%s/hibernate/%s/app:mem-%d", e.regB.Host, name, cycle)
		// The second cycle keeps its image on the node, and resumes from it.
		kept := cycle == 2
		cm := e.checkpointer(t, cri, pod, target, func(cfg *committer.Config) { cfg.Params.KeepLocal, cfg.Params.KeepLocalMaxBytes = kept, 1<<40 })
		res, err := cm.Checkpoint(ctx)
		if !checkpoints(cri) {
			if !errors.Is(err, checkpoint.ErrUnsupported) {
				t.Fatalf("checkpoint on %s: got %v, want %v", cri.Version, err, checkpoint.ErrUnsupported)
			}
			t.Logf("as expected on %s: %v", cri.Version, err)
			countsOn(t, ctx, cri, id, "after the refused checkpoint")
			return
		}
		if err != nil {
			t.Fatalf("cycle %d: checkpoint: %v\n%s", cycle, err, cri.Log())
		}
		_, atCheckpoint := counterLines(t, ctx, cri, id)
		t.Logf("cycle %d: checkpointed in %d ms; the counter was at %d", cycle, res.PauseWindow.Milliseconds(), atCheckpoint)
		pushed, _, err := cm.Push(ctx)
		if err != nil {
			t.Fatalf("cycle %d: push: %v", cycle, err)
		}
		// The push built the image from the commit step's archive, and left
		// nothing of it on the node.
		for _, dir := range []string{cm.cfg.CheckpointDir, cm.cfg.LayerDir} {
			if left, err := leftIn(dir); err != nil || len(left) > 0 {
				t.Errorf("cycle %d: after the push %s holds %v (%v), want nothing", cycle, dir, left, err)
			}
		}
		m, _ := remoteManifestConfig(t, pushed[0].Target.Repository()+"@"+pushed[0].Digest)
		if got := m.Layers[0].MediaType; got != layerType || res.Images[0].Layer.MediaType != layerType {
			t.Errorf("cycle %d: the checkpoint's layer is %s (the commit step said %s), want %s", cycle, got, res.Images[0].Layer.MediaType, layerType)
		}
		// The image every restore pulls first is the sandbox's first, also
		// under a restored container.
		if m.Annotations[ocispec.AnnotationBaseImageDigest] != baseDigest.String() {
			t.Errorf("cycle %d: the checkpoint's %s is %q, want the base's %s", cycle, ocispec.AnnotationBaseImageDigest, m.Annotations[ocispec.AnnotationBaseImageDigest], baseDigest)
		}
		ref := pushed[0].Target.Repository() + "@" + pushed[0].Digest
		if _, err := cri.Client.ImageService().Get(cri.Ctx(ctx), ref); (err == nil) != kept {
			t.Errorf("cycle %d: the node holds %s: %v; want it kept: %v", cycle, ref, err, kept)
		}
		if err := cri.RemovePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if _, err := ping(port); err == nil {
			t.Fatalf("cycle %d: the server still answers after its pod was removed", cycle)
		}

		// The resumed pod keeps the sandbox's name, as OpenSandbox's does.
		if pod, err = cri.RunPod(ctx, name, "default", "uid-"+randSuffix()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if id, err = cri.StartContainer(ctx, pod, "app", ref); err != nil {
			t.Fatalf("cycle %d: restoring from %s: %v\n%s", cycle, ref, err, cri.Log())
		}
		if _, err := cri.ExecSync(ctx, id, "true"); err != nil {
			t.Fatalf("cycle %d: exec in the restored container: %v", cycle, err)
		}
		t.Logf("cycle %d: restored from %s to a first exec in %d ms", cycle, ref, time.Since(start).Milliseconds())
		// The restored counter goes on from the checkpoint, under the first
		// cycle's mark.
		rmark, n := counterLines(t, ctx, cri, id)
		time.Sleep(time.Second)
		if _, later := counterLines(t, ctx, cri, id); rmark != mark || later <= n {
			t.Fatalf("cycle %d: after the restore: mark %s with %d lines, then %d, want mark %s and the counter going on (it was at %d after the checkpoint)",
				cycle, rmark, n, later, mark, atCheckpoint)
		}
		if got, err := ping(port); err != nil || got != "pong" {
			t.Fatalf("cycle %d: after the restore the listening socket answers %q, %v", cycle, got, err)
		}
		if got, err := cri.ExecSync(ctx, id, "sha256sum", "/noise"); err != nil || got != noise {
			t.Fatalf("cycle %d: after the restore /noise sums to %q (%v), want %q", cycle, got, err, noise)
		}
		var want strings.Builder
		for i := 1; i <= cycle; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if got, err := cri.ExecSync(ctx, id, "sh", "-c", "cat /cycle-*"); err != nil || got != want.String() {
			t.Fatalf("cycle %d: after the restore the cycles' files hold %q (%v), want 1 to %d", cycle, got, err, cycle)
		}
	}
}

// TestCheckpointRestoreSidecar takes a memory snapshot of a pod of two
// containers, a sandbox and a sidecar as OpenSandbox's pods may have, both
// frozen at once, and restores each into a new pod of the same name: both
// counters go on under their marks and both servers answer.
func TestCheckpointRestoreSidecar(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before freezing (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	name := "sb-" + randSuffix()
	pod, err := cri.RunPod(ctx, name, "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"app", "sidecar"}
	ports, ids, marks := map[string]int{}, map[string]string{}, map[string]string{}
	var targets []task.Target
	for _, c := range names {
		ports[c] = freePort(t)
		if ids[c], err = cri.StartContainer(ctx, pod, c, e.ociBase, hibernating(ports[c])...); err != nil {
			t.Fatal(err)
		}
		tgt, err := task.ParseTarget(c+"="+e.regB.Host+"/hibernate/"+name+"/"+c+":mem", true)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tgt)
	}
	for _, c := range names {
		marks[c] = waitCounting(t, ctx, cri, ids[c], 1)
		// As kubelet runs them, each in its own PID namespace: in one shared
		// with the pod, a restore could find its PIDs taken by the other's.
		if init, err := cri.ExecSync(ctx, ids[c], "cat", "/proc/1/cmdline"); err != nil || !strings.HasPrefix(init, "sh\x00") {
			t.Fatalf("PID 1 of container %s is %q (%v), want its own sh: the pod's containers share a PID namespace", c, init, err)
		}
	}
	cm := e.checkpointer(t, cri, pod, targets[0].Image, func(cfg *committer.Config) { cfg.Params.Targets = targets })
	res, err := cm.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, cri.Log())
	}
	if len(res.Images) != len(names) {
		t.Fatalf("checkpointed %d images, want %d", len(res.Images), len(names))
	}
	t.Logf("both checkpointed in one freeze of %d ms", res.PauseWindow.Milliseconds())
	pushed, _, err := cm.Push(ctx)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if err := cri.RemovePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if pod, err = cri.RunPod(ctx, name, "default", "uid-"+randSuffix()); err != nil {
		t.Fatal(err)
	}
	for _, p := range pushed {
		ref := p.Target.Repository() + "@" + p.Digest
		if ids[p.Target.Container], err = cri.StartContainer(ctx, pod, p.Target.Container, ref); err != nil {
			t.Fatalf("restoring %s from %s: %v\n%s", p.Target.Container, ref, err, cri.Log())
		}
	}
	for _, c := range names {
		if mark, _ := counterLines(t, ctx, cri, ids[c]); mark != marks[c] {
			t.Errorf("restored %s counts under mark %s, want %s: it restarted", c, mark, marks[c])
		}
		countsOn(t, ctx, cri, ids[c], "after the restore of "+c)
		if got, err := ping(ports[c]); err != nil || got != "pong" {
			t.Errorf("after the restore %s's server answers %q, %v", c, got, err)
		}
	}
}

// holding runs a pod whose container app runs hibernating and holds mib
// MiB in a shell variable, and returns them once its counter has started.
func (e *testEnv) holding(t *testing.T, ctx context.Context, cri *ctrharness.Containerd, mib int) (*ctrharness.Pod, string) {
	t.Helper()
	return e.counting(t, ctx, cri, fmt.Sprintf("hold=$(head -c %d /dev/zero | tr '\\0' x)\n", mib<<20))
}

// counting runs a pod whose container app runs prelude, then hibernating,
// and returns them once its counter has started.
func (e *testEnv) counting(t *testing.T, ctx context.Context, cri *ctrharness.Containerd, prelude string) (*ctrharness.Pod, string) {
	t.Helper()
	pod, err := cri.RunPod(ctx, "sb-"+randSuffix(), "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	script := hibernating(freePort(t))
	script[len(script)-1] = prelude + script[len(script)-1]
	id, err := cri.StartContainer(ctx, pod, "app", e.ociBase, script...)
	if err != nil {
		t.Fatal(err)
	}
	// The counter starts once the prelude is done.
	waitCounting(t, ctx, cri, id, 1)
	return pod, id
}

// TestCheckpointPastMaxPause bounds the pause of a memory snapshot below
// what CRIU needs to dump 256 MiB: the snapshot fails as past max-pause, not
// as unsupported (no fallback applies); the container runs on, unpaused, and
// stays so once CRIU is done; no dump is left on the node; and the same
// snapshot under the default bound succeeds.
func TestCheckpointPastMaxPause(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before freezing (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	pod, id := e.holding(t, ctx, cri, 256)
	// Both runs write to the same directories, the bounded one first.
	cm := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/"+pod.Config.Metadata.Name+"/app:bounded")
	const bound = 100 * time.Millisecond
	bounded := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/"+pod.Config.Metadata.Name+"/app:bounded", func(cfg *committer.Config) {
		cfg.Params.MaxPause = bound
		cfg.CheckpointDir, cfg.LayerDir = cm.cfg.CheckpointDir, cm.cfg.LayerDir
	})
	_, err := bounded.Checkpoint(ctx)
	if !errors.Is(err, freeze.ErrMaxPauseExceeded) || errors.Is(err, checkpoint.ErrUnsupported) || errors.Is(err, freeze.ErrThawFailed) {
		t.Fatalf("checkpoint bounded by max-pause %s: got %v, want %v alone", bound, err, freeze.ErrMaxPauseExceeded)
	}
	t.Logf("as expected: %v", err)
	// CRIU may dump on in containerd's shim after the deadline; when it is
	// done the container must still run, and nothing of its dump be left.
	cctx := cri.Ctx(ctx)
	for range 3 {
		time.Sleep(time.Second)
		ctr, err := cri.Client.LoadContainer(cctx, id)
		if err != nil {
			t.Fatal(err)
		}
		task, err := ctr.Task(cctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := task.Status(cctx); err != nil || st.Status != client.Running {
			t.Fatalf("after the failed checkpoint the container is %v (%v), want running", st.Status, err)
		}
		countsOn(t, ctx, cri, id, "after the failed checkpoint")
	}
	if left, err := leftIn(cm.cfg.CheckpointDir); err != nil || len(left) > 0 {
		t.Errorf("the checkpoint directory holds %v (%v) after the failed checkpoint, want nothing", left, err)
	}

	res, err := cm.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint under the default max-pause: %v", err)
	}
	t.Logf("under max-pause %s: pause window %d ms", task.DefaultMaxPause, res.PauseWindow.Milliseconds())
	rec, err := cm.records().Read(res.Images[0].Target.Container)
	if err != nil || rec == nil {
		t.Fatalf("the checkpoint left no record for the push step: %v", err)
	}
	if err := cm.records().Remove(res.Images[0].Target.Container, rec); err != nil {
		t.Error(err)
	}
}

// TestCheckpointNoRoom fails a memory snapshot that the node's disk has no room
// for as diskbudget.ErrNoRoom, not as unsupported: when the checkpoint
// directory is too small for the container's memory, before freezing it; when
// CRIU fills it all the same, once CRIU is done. Either way the container runs
// on.
func TestCheckpointNoRoom(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before looking at the disk (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	pod, id := e.holding(t, ctx, cri, 256)
	small := tmpfs64(t)
	var logged strings.Builder
	cm := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/"+pod.Config.Metadata.Name+"/app:noroom", func(cfg *committer.Config) {
		cfg.CheckpointDir = small
		cfg.Log = io.MultiWriter(testLogWriter{}, &logged)
	})

	t.Run("before freezing", func(t *testing.T) {
		_, err := cm.Checkpoint(ctx)
		if !errors.Is(err, diskbudget.ErrNoRoom) || errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), small) {
			t.Fatalf("checkpoint into 64 MiB of 256 MiB: got %v, want %v alone, naming %s", err, diskbudget.ErrNoRoom, small)
		}
		t.Logf("refused: %v", err)
		if strings.Contains(logged.String(), "frozen") {
			t.Errorf("the container was frozen before the refusal:\n%s", logged.String())
		}
		if left, err := leftIn(small); err != nil || len(left) > 0 {
			t.Errorf("the checkpoint directory holds %v (%v), want nothing", left, err)
		}
		countsOn(t, ctx, cri, id, "after the refusal")
	})

	t.Run("when CRIU fills the disk", func(t *testing.T) {
		// The check above cannot see everything (another writer, memory its
		// cgroup does not count): dump past it.
		live, err := cm.findLive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(small, "dump")
		dumper := checkpoint.New(cm.client, cm.pod().String(), testLog)
		err = dumper.Dump(namespaces.WithNamespace(ctx, committer.DefaultNamespace), live[0], dir)
		if !errors.Is(err, diskbudget.ErrNoRoom) || errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), small) {
			t.Fatalf("a dump of 256 MiB into 64 MiB: got %v, want %v alone, naming %s", err, diskbudget.ErrNoRoom, small)
		}
		t.Logf("as expected: %v", err)
		os.RemoveAll(dir)
		countsOn(t, ctx, cri, id, "after the failed dump")
	})
}

// TestCheckpointWithoutCRIU fails a memory snapshot on a node whose
// containerd finds no CRIU as unsupported, with containerd's words, and
// leaves the container running.
func TestCheckpointWithoutCRIU(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t)
	ctx := context.Background()
	pod, err := cri.RunPod(ctx, "sb-"+randSuffix(), "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	id, err := cri.StartContainer(ctx, pod, "app", e.ociBase, hibernating(freePort(t))...)
	if err != nil {
		t.Fatal(err)
	}
	cm := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/nocriu/app:mem")
	_, err = cm.Checkpoint(ctx)
	if !errors.Is(err, checkpoint.ErrUnsupported) {
		t.Fatalf("checkpoint without CRIU: got %v, want %v", err, checkpoint.ErrUnsupported)
	}
	t.Logf("refused: %v", err)
	task, err := cri.Client.LoadContainer(cri.Ctx(ctx), id)
	if err == nil {
		var tk client.Task
		if tk, err = task.Task(cri.Ctx(ctx), nil); err == nil {
			var st client.Status
			if st, err = tk.Status(cri.Ctx(ctx)); err == nil && st.Status != client.Running {
				err = fmt.Errorf("status %s", st.Status)
			}
		}
	}
	if err != nil {
		t.Fatalf("the container does not run after the refused checkpoint: %v", err)
	}
}

// TestCheckpointRefusedByCRIU fails a memory snapshot of a container with a
// process in a nested user and PID namespace, which CRIU refuses to dump, as
// unsupported, naming CRIU's log on the node, and leaves the container
// running. (An established TCP connection is no such case: with the options
// containerd's CRI and the committer pass, CRIU dumped one here.)
func TestCheckpointRefusedByCRIU(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s does not checkpoint: TestCheckpointRestore covers its refusal", cri.Version)
	}
	ctx := context.Background()
	pod, err := cri.RunPod(ctx, "sb-"+randSuffix(), "default", "uid-"+randSuffix())
	if err != nil {
		t.Fatal(err)
	}
	script := hibernating(freePort(t))
	script[2] = "busybox unshare -U -r -p -f busybox sleep 100000 &\n" + script[2]
	id, err := cri.StartContainer(ctx, pod, "app", e.ociBase, script...)
	if err != nil {
		t.Fatal(err)
	}
	waitCounting(t, ctx, cri, id, 1)
	cm := e.checkpointer(t, cri, pod, e.regB.Host+"/hibernate/refused/app:mem")
	_, err = cm.Checkpoint(ctx)
	if !errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), "criu-dump.log") {
		t.Fatalf("checkpoint of a nested namespace: got %v, want %v naming CRIU's dump log", err, checkpoint.ErrUnsupported)
	}
	t.Logf("refused: %v", err)
	countsOn(t, ctx, cri, id, "after the refused checkpoint")
}

// TestCheckpointPushedInChunks pushes memory snapshots, whose layer is
// hashed as it is uploaded, through a proxy that cuts or refuses chunk
// PATCHes: a cut chunk resumes (distribution's registry) or the upload
// starts again from byte 0 and is hashed again (go-containerregistry's,
// which has no upload status); a registry that refuses chunks gets the
// layer in one request. Each time the pushed layer reads back as its
// digest, and the image, kept on the node, unpacks (which checks the
// config's diff ID against the layer).
func TestCheckpointPushedInChunks(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before freezing (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	dist := startDistribution(t)
	// Random bytes in its filesystem change: a plain tar of several chunks.
	pod, id := e.counting(t, ctx, cri, "head -c 9437184 /dev/urandom >/noise\n")
	const chunk = 2 << 20
	for _, tc := range []struct {
		name  string
		ggcr  bool
		fault func(n int, cp chunkPatch) patchFault
		check func(t *testing.T, patches []chunkPatch, streamed int, size int64)
	}{
		{
			name: "third chunk cut mid-way: resumed",
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 3 {
					return cutKeepHalf
				}
				return passPatch
			},
			check: func(t *testing.T, patches []chunkPatch, _ int, _ int64) {
				cut := patches[2]
				if half := (cut.end - cut.start + 1) / 2; len(patches) < 4 || patches[3].start != cut.start+half {
					t.Errorf("after the cut at %d+%d the next PATCH is %+v, want it to start at %d", cut.start, half, patches[3:], cut.start+half)
				}
			},
		},
		{
			name: "no upload status: started again and hashed again",
			ggcr: true,
			fault: func(n int, _ chunkPatch) patchFault {
				if n == 3 {
					return cutKeepHalf
				}
				return passPatch
			},
			check: func(t *testing.T, patches []chunkPatch, _ int, size int64) {
				restarts := 0
				for _, cp := range patches[1:] {
					if cp.start == 0 {
						restarts++
					}
				}
				if last := patches[len(patches)-1]; restarts != 1 || last.end != size-1 {
					t.Errorf("chunk PATCHes %+v: %d restarts from byte 0, want 1, ending at byte %d", patches, restarts, size-1)
				}
			},
		},
		{
			name: "chunks refused: one request",
			fault: func(int, chunkPatch) patchFault {
				return refuseRange
			},
			check: func(t *testing.T, patches []chunkPatch, streamed int, _ int64) {
				if len(patches) != 1 || streamed != 2 {
					t.Errorf("chunk PATCHes %+v and %d monolithic uploads, want the first PATCH refused, then the layer and the config in one request each", patches, streamed)
				}
			},
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
			cm := e.checkpointer(t, cri, pod, proxy.host+"/hibernate/"+pod.Config.Metadata.Name+"/app:chunked", func(cfg *committer.Config) {
				cfg.ChunkSize = chunk
				cfg.Params.KeepLocal, cfg.Params.KeepLocalMaxBytes = true, 1<<40
			})
			if _, err := cm.Checkpoint(ctx); err != nil {
				t.Fatalf("checkpoint: %v\n%s", err, cri.Log())
			}
			pushed, _, err := cm.Push(ctx)
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			ref := pushed[0].Target.Repository() + "@" + pushed[0].Digest
			m, cfg := remoteManifestConfig(t, ref)
			layer := m.Layers[0]
			patches, streamed := proxy.record()
			t.Logf("layer %s of %d bytes; chunk PATCHes %+v; %d monolithic", layer.Digest, layer.Size, patches, streamed)
			if layer.MediaType != ocispec.MediaTypeImageLayer || layer.Size <= 3*chunk {
				t.Fatalf("the layer is %s of %d bytes, want a plain tar of more than 3 chunks", layer.MediaType, layer.Size)
			}
			var rootfs ocispec.RootFS
			if err := json.Unmarshal(cfg["rootfs"], &rootfs); err != nil || len(rootfs.DiffIDs) != 1 || rootfs.DiffIDs[0] != layer.Digest {
				t.Errorf("the config's rootfs is %s (%v), want the plain tar's digest %s", cfg["rootfs"], err, layer.Digest)
			}
			assertLayerDigests(t, ref)
			tc.check(t, patches, streamed, layer.Size)
			if _, err := cri.Client.ImageService().Get(cri.Ctx(ctx), ref); err != nil {
				t.Errorf("the image was not kept (unpacked) on the node: %v", err)
			}
			countsOn(t, ctx, cri, id, "after the push")
		})
	}
}

// TestCheckpointPushUnderGarbageCollection pushes memory snapshots while
// containerd collects garbage without pause, as a busy node's containerd
// may at any moment: the image the push builds (its config and manifest,
// written into containerd before an image record names them) survives to
// be pushed, every time.
func TestCheckpointPushUnderGarbageCollection(t *testing.T) {
	e := requireEnv(t)
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before freezing (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	pod, _ := e.counting(t, ctx, cri, "")
	ls := cri.Client.LeasesService()
	for i := 1; i <= 5; i++ {
		cm := e.checkpointer(t, cri, pod, fmt.Sprintf("%s/hibernate/%s/app:gc-%d", e.regB.Host, pod.Config.Metadata.Name, i))
		if _, err := cm.Checkpoint(ctx); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		stop := make(chan struct{})
		collected := make(chan int)
		go func() {
			n := 0
			defer func() { collected <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := ls.Create(cri.Ctx(ctx), leases.WithRandomID())
				if err == nil {
					err = ls.Delete(cri.Ctx(ctx), l, leases.SynchronousDelete)
				}
				if err != nil {
					t.Errorf("collecting garbage: %v", err)
					return
				}
				n++
			}
		}()
		_, _, err := cm.Push(ctx)
		close(stop)
		n := <-collected
		if err != nil {
			t.Fatalf("push %d, under %d garbage collections: %v", i, n, err)
		}
		t.Logf("push %d: pushed under %d garbage collections", i, n)
	}
}
