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
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// An archive here is made by hand where CRIU is not at hand: a push step
// reads only the record the commit step left and the files of the archive
// it names, whatever wrote them.

// fakeArchive writes, as the commit step of run of pod p would have left
// them for container app, a checkpoint archive of mib MiB of random bytes
// in checkpointDir, owned by the Task pod taskPodUID, and its record in
// layerDir.
func fakeArchive(t *testing.T, p *runningPod, taskPodUID, checkpointDir, layerDir string, mib int) string {
	t.Helper()
	rec := &checkpoint.Record{
		Archive:     checkpoint.ArchiveName(taskPodUID, p.runID, "app"),
		MediaType:   ocispec.MediaTypeImageLayer,
		Created:     time.Now().UTC(),
		CreatedBy:   "sandbox-checkpoint pod " + p.namespace + "/" + p.name + " container app",
		Annotations: map[string]string{"io.kubernetes.cri-o.annotations.checkpoint.name": "app"},
	}
	dir := filepath.Join(checkpointDir, rec.Archive)
	if err := os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	pages := make([]byte, mib<<20)
	_, _ = rand.Read(pages)
	for name, b := range map[string][]byte{"checkpoint/pages-1.img": pages, "spec.dump": []byte(`{"process":{"env":["TOKEN=secret"]}}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tgt, err := task.ParseTarget("app=127.0.0.1:1/unused:1", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := (checkpoint.Records{LayerDir: layerDir}).Write(tgt.Container, rec); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pushArchive starts the push step of pod p's run on the archive that
// fakeArchive left, pushing to reg, keeping the image on the node or not
// (keepLocal), and returns once its upload has run a while.
func (e *testEnv) pushArchive(t *testing.T, p *runningPod, reg *ctrharness.Registry, checkpointDir, layerDir, keepLocal string) (*exec.Cmd, *bytes.Buffer, chan struct{}, string) {
	t.Helper()
	results := t.TempDir()
	cmd, out := e.binCmd(t, p, "push", "commit", "true", "", results)
	cmd.Args = append(cmd.Args, "--checkpoint-dir="+checkpointDir, "--layer-dir="+layerDir, "--keep-local="+keepLocal,
		"app="+reg.Host+"/hibernate/"+p.name+"/app:mem")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatalf("the push step ended before it was signalled:\n%s", out)
	case <-time.After(2 * time.Second):
	}
	if strings.Contains(out.String(), "uploaded the checkpoint's layer") {
		t.Fatalf("the push step uploaded the layer before it was signalled:\n%s", out)
	}
	return cmd, out, done, results
}

// gone waits up to timeout for path to be removed.
func gone(path string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return true
		}
	}
	return false
}

// TestSIGTERMDuringPushRemovesCheckpoint signals the push step of a memory
// snapshot mid-upload, as the deletion of the snapshot (its TaskRun
// cancelled) or the TaskRun's timeout does: the step exits 128+signal and
// leaves nothing of the memory in checkpoint-dir, nor its record, nor, once
// containerd collects its garbage, the layer it was keeping on the node
// (keep-local, the Task's default).
func TestSIGTERMDuringPushRemovesCheckpoint(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	// 48 MiB at 4 MiB/s: the upload lasts about 12 s.
	reg := ctrharness.NewRegistryBehindLink(4 << 20)
	defer reg.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := &runningPod{name: "sb-" + randSuffix(), namespace: "default", uid: "uid-" + randSuffix(), runID: "run-" + randSuffix()}
			checkpointDir, layerDir := t.TempDir(), t.TempDir()
			archive := fakeArchive(t, p, "taskpod-"+randSuffix(), checkpointDir, layerDir, 48)
			layer, err := checkpoint.ArchiveLayer(archive, ocispec.MediaTypeImageLayer)
			if err != nil {
				t.Fatal(err)
			}
			cmd, out, done, results := e.pushArchive(t, p, reg, checkpointDir, layerDir, "true")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the push step did not exit within 30 s of %s:\n%s", sig, out)
			}
			t.Logf("committer output:\n%s", out)
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Errorf("exit code %d, want %d", code, 128+int(sig))
			}
			if msg := readResult(t, results, "ERROR"); !strings.Contains(msg, "interrupted by") {
				t.Errorf("ERROR result %q", msg)
			}
			for _, dir := range []string{checkpointDir, layerDir} {
				if left, err := leftIn(dir); err != nil || len(left) > 0 {
					t.Errorf("after %s mid-push %s holds %v (%v), want nothing (the archive was %s)", sig, dir, left, err, filepath.Base(archive))
				}
			}
			e.collectGarbage(t)
			if info, err := e.ctrd.Client.ContentStore().Info(ctx, layer.Digest); !errdefs.IsNotFound(err) {
				t.Errorf("after %s mid-push containerd holds the checkpoint's layer %s: %+v (%v)", sig, layer.Digest, info, err)
			}
			statuses, err := e.ctrd.Client.ContentStore().ListStatuses(ctx)
			for _, st := range statuses {
				if strings.Contains(st.Ref, p.runID) {
					t.Errorf("after %s mid-push containerd holds the ingest %s (%d bytes)", sig, st.Ref, st.Offset)
				}
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// TestSweepRemovesArchivesOfRunsOver leaves, in one checkpoint-dir, the
// archive of a push step killed with SIGKILL (which no handler sees), whose
// Task pod is then gone; an archive, two hours old, whose Task pod still
// runs; and one that names no pod and is fresh. The next unpause run on
// the node, then the next filesystem snapshot, each removes the killed
// run's archive, within the run, and keeps the other two.
func TestSweepRemovesArchivesOfRunsOver(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	reg := ctrharness.NewRegistryBehindLink(4 << 20)
	defer reg.Close()
	checkpointDir, layerDir := t.TempDir(), t.TempDir()

	// The Task pod of a push that still runs, for hours already.
	liveUID := "taskpod-" + randSuffix()
	liveCtr, _, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: liveUID + "-push", Pod: "commit-live", PodNamespace: "sandbox-snapshot-system",
		PodUID: liveUID, Name: "step-push", Image: e.dockerBase}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.ctrd.DeleteContainer(ctx, liveCtr)
	livePod := &runningPod{name: "sb-" + randSuffix(), namespace: "default", uid: "uid-" + randSuffix(), runID: "run-" + randSuffix()}
	live := fakeArchive(t, livePod, liveUID, checkpointDir, t.TempDir(), 1)
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(live, old, old); err != nil {
		t.Fatal(err)
	}
	// An archive that names no Task pod (an earlier committer's, or a run
	// outside a pod), written a minute ago.
	unowned := fakeArchive(t, &runningPod{name: "sb-x", namespace: "default", runID: "run-" + randSuffix()}, "", checkpointDir, t.TempDir(), 1)

	sandbox := e.startPod(t, podContainer{"app", e.ociBase})
	for _, sweeper := range []string{"unpause", "filesystem"} {
		t.Run(sweeper, func(t *testing.T) {
			// A push step, in its Task pod, killed with SIGKILL mid-upload;
			// then the pod is gone (kubelet removes its containers).
			deadUID := "taskpod-" + randSuffix()
			deadCtr, _, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: deadUID + "-push", Pod: "commit-dead", PodNamespace: "sandbox-snapshot-system",
				PodUID: deadUID, Name: "step-push", Image: e.dockerBase}, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := &runningPod{name: sandbox.name, namespace: sandbox.namespace, uid: sandbox.uid, runID: "run-" + randSuffix()}
			dead := fakeArchive(t, p, deadUID, checkpointDir, layerDir, 48)
			cmd, out, done, _ := e.pushArchive(t, p, reg, checkpointDir, layerDir, "false")
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-done
			if _, err := os.Stat(dead); err != nil {
				t.Fatalf("the archive of the killed push is gone already (%v); output:\n%s", err, out)
			}
			if err := e.ctrd.DeleteContainer(ctx, deadCtr); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(layerDir, "checkpoint-app.json"))

			var run *exec.Cmd
			var rout *bytes.Buffer
			switch sweeper {
			case "unpause":
				run, rout = e.binCmd(t, sandbox, "commit", "unpause", "false", "", t.TempDir())
			case "filesystem":
				run, rout = e.binCmd(t, sandbox, "commit", "commit", "true", "", t.TempDir())
				run.Args = append(run.Args, "--snapshot-mode=Filesystem", "app="+e.regA.Host+"/snap/"+sandbox.name+"-app:"+randSuffix())
			}
			run.Args = append(run.Args[:1], append([]string{"--checkpoint-dir=" + checkpointDir}, run.Args[1:]...)...)
			if err := run.Run(); err != nil {
				t.Fatalf("%s run: %v\n%s", sweeper, err, rout)
			}
			t.Logf("%s run:\n%s", sweeper, rout)
			if _, err := os.Lstat(dead); !os.IsNotExist(err) {
				t.Errorf("after the %s run the archive of the killed run (Task pod gone) is still there: %v", sweeper, err)
			}
			for what, path := range map[string]string{"of a Task pod that still runs, two hours old": live, "naming no Task pod, fresh": unowned} {
				if _, err := os.Stat(path); err != nil {
					t.Errorf("after the %s run the archive %s is gone: %v", sweeper, what, err)
				}
			}
			e.assertAllRunning(t, sandbox)
		})
	}
}

// TestCheckpointArchiveLifecycle runs the Task's two steps as processes on
// a real memory snapshot (containerd 2.x with its CRI, CRIU), each step in
// a Task pod of its own in the same containerd: the commit step leaves an
// archive named by its Task pod, readable by root alone (directories 0700,
// files 0600); a push step signalled mid-upload leaves nothing of it; a push
// step killed with SIGKILL leaves it, and the next unpause run removes it
// once the Task pod is gone, not before.
func TestCheckpointArchiveLifecycle(t *testing.T) {
	e := requireEnv(t)
	if os.Getenv("CRIU_DIR") == "" {
		t.Skip("CRIU_DIR is not set: this test takes a real memory snapshot (TestSIGTERMDuringPushRemovesCheckpoint and TestSweepRemovesArchivesOfRunsOver cover the rest without CRIU)")
	}
	cri := e.startCRI(t, criuDir(t))
	if !checkpoints(cri) {
		t.Skipf("%s refuses memory snapshots before writing any (TestCheckpointRestore)", cri.Version)
	}
	ctx := context.Background()
	reg := ctrharness.NewRegistryBehindLink(4 << 20)
	defer reg.Close()
	// 32 MiB of random bytes in the filesystem change: about 8 s of upload.
	pod, id := e.counting(t, ctx, cri, "head -c 33554432 /dev/urandom >/noise\n")
	md := pod.Config.Metadata
	checkpointDir := t.TempDir()

	// step runs one step of run in the Task pod taskPod, with the flags the
	// Task passes, and returns it started.
	step := func(t *testing.T, name, mode, run string, taskPod *ctrharness.Pod, layerDir string, extra ...string) (*exec.Cmd, *bytes.Buffer, chan struct{}) {
		t.Helper()
		p := &runningPod{name: md.Name, namespace: md.Namespace, uid: md.Uid, runID: run}
		cmd, out := e.binCmd(t, p, name, mode, "true", "", t.TempDir())
		cmd.Args = append(cmd.Args, "--containerd-address="+cri.Address, "--checkpoint-dir="+checkpointDir, "--layer-dir="+layerDir,
			"--task-pod-uid="+taskPod.Config.Metadata.Uid, "--snapshot-mode=Memory", "--keep-local=false", "--memory-anonymous-pull=Allow")
		cmd.Args = append(cmd.Args, extra...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		return cmd, out, done
	}
	// commit takes a memory snapshot in a new Task pod and returns the pod
	// and its archive.
	commit := func(t *testing.T, run, layerDir string) (*ctrharness.Pod, string) {
		t.Helper()
		taskPod, err := cri.RunPod(ctx, "commit-"+randSuffix(), "sandbox-snapshot-system", "taskpod-"+randSuffix())
		if err != nil {
			t.Fatal(err)
		}
		cmd, out, done := step(t, "commit", "commit", run, taskPod, layerDir, "app="+reg.Host+"/hibernate/"+md.Name+"/app:"+run)
		<-done
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("commit step: exit code %d\n%s\n%s", code, out, cri.Log())
		}
		archive := filepath.Join(checkpointDir, checkpoint.ArchiveName(taskPod.Config.Metadata.Uid, run, "app"))
		if _, err := os.Stat(archive); err != nil {
			t.Fatalf("the commit step left no archive named by its Task pod: %v\n%s", err, out)
		}
		return taskPod, archive
	}
	// push starts the push step of run in taskPod and returns it once its
	// upload has run a while.
	push := func(t *testing.T, run string, taskPod *ctrharness.Pod, layerDir string) (*exec.Cmd, *bytes.Buffer, chan struct{}) {
		t.Helper()
		cmd, out, done := step(t, "push", "commit", run, taskPod, layerDir, "app="+reg.Host+"/hibernate/"+md.Name+"/app:"+run)
		select {
		case <-done:
			t.Fatalf("the push step ended before it was signalled:\n%s", out)
		case <-time.After(2 * time.Second):
		}
		return cmd, out, done
	}

	t.Run("root only, and SIGTERM mid-push", func(t *testing.T) {
		run, layerDir := "run-"+randSuffix(), t.TempDir()
		taskPod, archive := commit(t, run, layerDir)
		defer cri.RemovePod(ctx, taskPod)
		err := filepath.WalkDir(archive, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			want := os.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
				t.Errorf("%s: owner %d, want root", p, st.Uid)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		cmd, out, done := push(t, run, taskPod, layerDir)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-done
		if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
			t.Errorf("push step: exit code %d, want %d\n%s", code, 128+int(syscall.SIGTERM), out)
		}
		if !gone(archive, 5*time.Second) {
			t.Errorf("the archive is still there after SIGTERM mid-push:\n%s", out)
		}
		countsOn(t, ctx, cri, id, "after the signalled push")
	})

	t.Run("SIGKILL mid-push, then an unpause run", func(t *testing.T) {
		run, layerDir := "run-"+randSuffix(), t.TempDir()
		taskPod, archive := commit(t, run, layerDir)
		cmd, _, done := push(t, run, taskPod, layerDir)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-done
		unpause := func() string {
			p := &runningPod{name: md.Name, namespace: md.Namespace, uid: md.Uid, runID: run}
			un, out := e.binCmd(t, p, "commit", "unpause", "false", "", t.TempDir())
			un.Args = append(un.Args, "--containerd-address="+cri.Address, "--checkpoint-dir="+checkpointDir)
			if err := un.Run(); err != nil {
				t.Fatalf("unpause run: %v\n%s", err, out)
			}
			return out.String()
		}
		// Its Task pod still runs (its other step, its sandbox): kept.
		if out := unpause(); !exists(archive) {
			t.Fatalf("an unpause run removed the archive of a Task pod that still runs:\n%s", out)
		}
		if err := cri.RemovePod(ctx, taskPod); err != nil {
			t.Fatal(err)
		}
		if out := unpause(); exists(archive) {
			t.Errorf("the archive of the killed push is still there after an unpause run, its Task pod gone:\n%s", out)
		}
	})
}

// exists tells whether path is there.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
