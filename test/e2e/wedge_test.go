//go:build e2e

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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

const (
	// snapshotUIDLabel is the TaskRun label naming the UID of the snapshot
	// it works for (the operator's sandbox.SnapshotUIDLabel).
	snapshotUIDLabel = sandbox.GroupName + "/sandbox-snapshot-uid"
	// finalizerName is the operator's finalizer on the snapshots it handles.
	finalizerName = sandbox.GroupName + "/taskrun-cleanup"
)

// TestOrphanTaskRun: OpenSandbox deletes and recreates its `<sandbox>-pause`
// snapshot under the same name on every pause, so the deterministic TaskRun
// name of the new snapshot can already be taken by a TaskRun of a snapshot
// that no longer exists. That orphan must be deleted and the new snapshot
// must go on, not wait for ever.
func TestOrphanTaskRun(t *testing.T) {
	// An orphan the operator made itself: the earlier snapshot of that name
	// was deleted while no controller ran, its finalizer stripped (as a
	// forced clean-up does), so nothing cleaned up its TaskRun.
	t.Run("LeftByDeletedSnapshot", func(t *testing.T) {
		e := framework.Setup(t)
		t.Cleanup(func() { framework.EnsureOneController(t) })
		e.CreateSandbox("sb", framework.SandboxOpts{})
		e.CreateSnapshot("sb-pause", "sb")
		old := e.WaitSnapshot("sb-pause", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
		name := names.CommitTaskRun(old)
		orphan := e.WaitTaskRun(name, "to exist", nil)
		e.SetTaskRunStatus(name, framework.Running)
		e.SetTaskRunStatus(name, framework.Succeeded(11, framework.DigestsFor(orphan)...))
		e.WaitSnapshot("sb-pause", "Succeed", framework.IsPhase(v1alpha1.PhaseSucceed))

		framework.Controller(t, "stop")
		snaps := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS)
		if _, err := snaps.Patch(e.Ctx, "sb-pause", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("removing the finalizers of sb-pause: %v", err)
		}
		if err := snaps.Delete(e.Ctx, "sb-pause", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.WaitSnapshotGone("sb-pause")
		e.CreateSnapshot("sb-pause", "sb")
		framework.Controller(t, "start")

		checkOrphanReplaced(t, e, "sb-pause", orphan)
	})

	// An orphan with the snapshot's TaskRun name and labels, but the UID of
	// a snapshot that never existed here; it has not even started.
	t.Run("ForeignUID", func(t *testing.T) {
		e := framework.Setup(t)
		e.CreateSandbox("sb", framework.SandboxOpts{})
		probe := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "sb-pause"}}
		name := names.CommitTaskRun(probe)
		tr := test.MustParse[pipelinev1.TaskRun](t, `
apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  name: %s
  namespace: %s
  labels:
    %s: %s
    %s: %s
    %s: sb-pause
    %s: %s
    %s: sb
spec:
  taskRef:
    name: %s
  params:
  - name: %s
    value: %s
`, name, test.SystemNamespace,
			sandbox.ManagedByLabel, sandbox.ManagedByValue,
			snapshotUIDLabel, uuid.NewUUID(),
			sandbox.SnapshotNameLabel,
			sandbox.SnapshotNamespaceLabel, e.NS,
			sandbox.SandboxNameLabel,
			task.Name, task.ParamMode, task.ModeCommit)
		orphan, err := e.C.Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Create(e.Ctx, tr, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the orphan TaskRun %s: %v", name, err)
		}
		framework.Cleanup(t, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = e.C.Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Delete(ctx, name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &orphan.UID}})
		})
		e.CreateSnapshot("sb-pause", "sb")
		checkOrphanReplaced(t, e, "sb-pause", orphan)
	})
}

// checkOrphanReplaced checks that the snapshot's TaskRun name, held by
// orphan, is freed (the orphan deleted) and taken by a TaskRun of this
// snapshot, which then carries the snapshot to Succeed.
func checkOrphanReplaced(t *testing.T, e *framework.Env, snapshot string, orphan *pipelinev1.TaskRun) {
	t.Helper()
	s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, snapshot, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if orphan.Labels[snapshotUIDLabel] == string(s.UID) {
		t.Fatalf("the orphan TaskRun carries the new snapshot's UID %s: the test proves nothing", s.UID)
	}
	name := orphan.Name
	tr := e.WaitTaskRun(name, "to be recreated for snapshot uid "+string(s.UID), func(tr *pipelinev1.TaskRun) bool {
		return tr.UID != orphan.UID && tr.Labels[snapshotUIDLabel] == string(s.UID)
	})
	if n := e.TaskRuns.WaitDeleted(e.Ctx, name, 1); n < 1 {
		t.Errorf("TaskRun %s was replaced but no deletion of the orphan was seen", name)
	}
	e.SetTaskRunStatus(name, framework.Running)
	e.SetTaskRunStatus(name, framework.Succeeded(13, framework.DigestsFor(tr)...))
	s = e.WaitSnapshot(snapshot, "Succeed", framework.IsTerminal)
	if s.Status.Phase != v1alpha1.PhaseSucceed {
		t.Fatalf("phase %s, want Succeed:\n%s", s.Status.Phase, framework.Dump(s.Status))
	}
	if c := framework.Condition(t, s, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %s/%s (%s), want True", c.Status, c.Reason, c.Message)
	}
	want := framework.DigestsFor(tr)
	for i, c := range s.Status.Containers {
		if i >= len(want) || c.ImageDigest != want[i] {
			t.Errorf("containers[%d] (%s) imageDigest = %q, want the new TaskRun's %v", i, c.ContainerName, c.ImageDigest, want)
		}
	}
}

// TestDeleteRightAfterCreate: snapshots deleted the moment they are created
// leave no TaskRun behind, whichever step the controller had reached. Half
// are deleted after a short delay (0 to 110 ms), half the moment the
// controller's finalizer shows on them, that is between the finalizer and
// the TaskRun of the controller's first pass. Several sandboxes, so that some
// snapshots are deleted while their commit runs, others while they wait for
// another commit of their pod.
func TestDeleteRightAfterCreate(t *testing.T) {
	e := framework.Setup(t)
	// Deletion waits for a cancelled commit to end; Tekton ends it at once.
	e.AutoCancel()
	const sandboxes, perSandbox = 8, 3
	for i := 0; i < sandboxes; i++ {
		e.CreateSandbox(fmt.Sprintf("sb-%d", i), framework.SandboxOpts{})
	}
	snaps := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []string
		errs    []error
	)
	for i := 0; i < sandboxes*perSandbox; i++ {
		name := fmt.Sprintf("quick-%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &v1alpha1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: name},
				Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: fmt.Sprintf("sb-%d", i%sandboxes)},
			}
			s, err := snaps.Create(e.Ctx, s, metav1.CreateOptions{})
			if err == nil {
				if i%2 == 0 {
					time.Sleep(time.Duration(i%6) * 22 * time.Millisecond)
				} else {
					// Until the finalizer shows (at most 10 s: if it never
					// does, the snapshot is deleted anyway).
					ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
					_, _ = watchtools.Until(ctx, s.ResourceVersion, e.SnapshotLW(name), func(ev watch.Event) (bool, error) {
						got, ok := ev.Object.(*v1alpha1.SandboxSnapshot)
						return ok && slices.Contains(got.Finalizers, finalizerName), nil
					})
					cancel()
				}
				err = snaps.Delete(e.Ctx, name, metav1.DeleteOptions{})
				if apierrs.IsNotFound(err) {
					err = nil
				}
			}
			mu.Lock()
			defer mu.Unlock()
			created = append(created, name)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("creating and deleting snapshots: %v", errs)
	}
	n := len(created)
	for _, name := range created {
		e.WaitSnapshotGone(name)
	}

	// No TaskRun of these snapshots may exist any more, nor appear later.
	list := func() []string { return test.TaskRunNames(test.TaskRunsOf(e.Ctx, t, e.C, e.NS, "")) }
	var left []string
	start := time.Now()
	err := wait.PollUntilContextTimeout(e.Ctx, 250*time.Millisecond, framework.Timeout, true, func(context.Context) (bool, error) {
		left = list()
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("TaskRuns of deleted snapshots still exist %v after the snapshots went: %v", time.Since(start).Round(time.Second), left)
	}
	// Absence must last: a controller pass that started from a stale copy of
	// a deleted snapshot would create its TaskRun now.
	err = wait.PollUntilContextTimeout(e.Ctx, 250*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
		left = list()
		return len(left) != 0, nil
	})
	if err == nil {
		t.Fatalf("TaskRuns %v appeared after every snapshot of %s was deleted", left, e.NS)
	}
	made := e.TaskRuns.Created()
	for name, adds := range made {
		if del := e.TaskRuns.Deleted(name); del != adds {
			t.Errorf("TaskRun %s was created %d times and deleted %d times", name, adds, del)
		}
	}
	t.Logf("%d of %d snapshots got a TaskRun before their deletion; every one was removed", len(made), n)
}

// TestClassSwitchKeepsFinalizedSnapshots: a snapshot that carries the
// operator's finalizer stays the operator's, whatever default-class says
// later. Switching default-class to opensandbox (OpenSandbox's own
// controller) must strand neither a snapshot being deleted (Terminating)
// nor one being committed (Committing).
func TestClassSwitchKeepsFinalizedSnapshots(t *testing.T) {
	e := framework.Setup(t)
	// One sandbox each: commits of one pod run one at a time.
	e.CreateSandbox("sb-a", framework.SandboxOpts{})
	e.CreateSandbox("sb-b", framework.SandboxOpts{})
	e.CreateSnapshot("deleted", "sb-a")
	e.CreateSnapshot("finished", "sb-b")
	hasFinalizer := func(s *v1alpha1.SandboxSnapshot) bool {
		return s.Status.Phase == v1alpha1.PhaseCommitting && slices.Contains(s.Finalizers, finalizerName)
	}
	deleted := e.WaitSnapshot("deleted", "Committing with the finalizer", hasFinalizer)
	finished := e.WaitSnapshot("finished", "Committing with the finalizer", hasFinalizer)
	deletedTR := e.WaitTaskRun(names.CommitTaskRun(deleted), "to exist", nil)
	finishedTR := e.WaitTaskRun(names.CommitTaskRun(finished), "to exist", nil)
	e.SetTaskRunStatus(deletedTR.Name, framework.Running)
	e.SetTaskRunStatus(finishedTR.Name, framework.Running)

	// Registered before the patch, so it runs after the restore: later
	// tests' snapshots must not be created while the switch still applies.
	logs := logOffsets()
	switched := false
	t.Cleanup(func() {
		if switched {
			if err := waitConfigLoaded(t, logs, `"defaultClass":"tekton"`); err != nil {
				t.Errorf("after restoring config-snapshot: %v", err)
			}
		}
	})
	patchSnapshotConfig(t, e, map[string]any{config.DefaultClassKey: "opensandbox"})
	switched = true
	if err := waitConfigLoaded(t, logs, `"defaultClass":"opensandbox"`); err != nil {
		t.Fatal(err)
	}
	// A snapshot made now, without the class annotation, is OpenSandbox's.
	e.CreateSnapshot("theirs", "sb-a")

	// Deleting a finalized snapshot still runs the whole finalizer: the
	// commit is cancelled, the sandbox thawed, both TaskRuns removed.
	if err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Delete(e.Ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitTaskRun(deletedTR.Name, "to be cancelled", func(tr *pipelinev1.TaskRun) bool {
		return tr.Spec.Status == pipelinev1.TaskRunSpecStatusCancelled
	})
	// Play Tekton: the cancelled pod's commit step was still running.
	e.SetTaskRunStatus(deletedTR.Name, framework.CancelledMidCommit)
	unpause := e.WaitTaskRun(names.UnpauseTaskRun(deleted), "to exist", nil)
	e.SetTaskRunStatus(unpause.Name, framework.Succeeded(0))
	e.WaitSnapshotGone("deleted")
	e.WaitTaskRunGone(deletedTR.Name)
	e.WaitTaskRunGone(unpause.Name)

	// A finalized snapshot's commit is still mirrored to the end.
	e.SetTaskRunStatus(finishedTR.Name, framework.Succeeded(17, framework.DigestsFor(finishedTR)...))
	s := e.WaitSnapshot("finished", "Succeed", framework.IsTerminal)
	if s.Status.Phase != v1alpha1.PhaseSucceed {
		t.Errorf("finished: phase %s, want Succeed:\n%s", s.Status.Phase, framework.Dump(s.Status))
	}

	theirs, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(theirs.Finalizers) != 0 || theirs.Status.Phase != "" || len(e.TaskRunsOf("theirs")) != 0 {
		t.Errorf("a snapshot of class opensandbox was handled: finalizers %v, phase %q, TaskRuns %v",
			theirs.Finalizers, theirs.Status.Phase, test.TaskRunNames(e.TaskRunsOf("theirs")))
	}
}

// logOffsets returns the current sizes of the local controllers' logs.
func logOffsets() map[string]int64 {
	out := map[string]int64{}
	files, _ := filepath.Glob(filepath.Join(framework.RepoRoot(), "_output", "cluster", "logs", "controller-*.log"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			out[f] = fi.Size()
		}
	}
	return out
}

// waitConfigLoaded waits until a controller logs, after the offsets, that it
// loaded a config-snapshot whose log line contains want.
func waitConfigLoaded(t *testing.T, offsets map[string]int64, want string) error {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, framework.Timeout, true, func(context.Context) (bool, error) {
		files, _ := filepath.Glob(filepath.Join(framework.RepoRoot(), "_output", "cluster", "logs", "controller-*.log"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil || int64(len(b)) < offsets[f] {
				continue
			}
			for _, line := range strings.Split(string(b[offsets[f]:]), "\n") {
				if strings.Contains(line, "Loaded config-snapshot") && strings.Contains(line, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no controller logged loading config-snapshot with %s within %v", want, framework.Timeout)
	}
	t.Logf("a controller loaded config-snapshot with %s after %v", want, time.Since(start).Round(time.Millisecond))
	return nil
}

// TestCommitPodCannotStart: while the commit TaskRun's pod cannot start, the
// snapshot stays Committing and its Ready condition says why, in the words
// of the scheduler or the kubelet, within seconds. The statuses are the ones
// Tekton writes for such a pod (pkg/pod/status.go, getWaitingMessage).
func TestCommitPodCannotStart(t *testing.T) {
	e := framework.Setup(t)
	for i, tc := range []struct {
		name    string
		reason  string
		message string
		// why is the part of message the snapshot must show.
		why string
	}{{
		name:   "Unschedulable",
		reason: "Pending",
		message: `pod status "PodScheduled":"False"; message: "0/3 nodes are available: 1 node(s) had untolerated taint {example.com/gpu: }, ` +
			`2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."`,
		why: "1 node(s) had untolerated taint {example.com/gpu: }",
	}, {
		name:   "ImagePullBackOff",
		reason: "PullImageFailed",
		message: `build step "step-commit" is pending with reason "Back-off pulling image \"127.0.0.1:5000/committer:missing\": ` +
			`ErrImagePull: failed to pull and unpack image: not found"`,
		why: "Back-off pulling image",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sb, snap := fmt.Sprintf("sb-%d", i), fmt.Sprintf("stuck-%d", i)
			e.CreateSandbox(sb, framework.SandboxOpts{})
			e.CreateSnapshot(snap, sb)
			s := e.WaitSnapshot(snap, "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
			tr := e.WaitTaskRun(names.CommitTaskRun(s), "to exist", nil)
			e.SetTaskRunStatus(tr.Name, func(tr *pipelinev1.TaskRun) {
				now := metav1.Now()
				tr.Status.StartTime = &now
				tr.Status.PodName = tr.Name + "-pod"
				tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown,
					Reason: tc.reason, Message: tc.message})
			})
			var last *v1alpha1.SandboxSnapshot
			test.Until(e.Ctx, t, 10*time.Second, snap+"'s Ready condition to say why its commit pod cannot start",
				&v1alpha1.SandboxSnapshot{}, e.SnapshotLW(snap), nil, func(ev watch.Event) (bool, error) {
					if ev.Type == watch.Deleted {
						return false, fmt.Errorf("%s was deleted", snap)
					}
					last = ev.Object.(*v1alpha1.SandboxSnapshot)
					r := last.Status.GetCondition(v1alpha1.ConditionReady)
					return r != nil && strings.Contains(r.Message, tc.why), nil
				}, func() string { return framework.Dump(last) })
			r := framework.Condition(t, last, v1alpha1.ConditionReady)
			if last.Status.Phase != v1alpha1.PhaseCommitting || r.Status != metav1.ConditionFalse {
				t.Errorf("phase %s, Ready %s, want Committing and False while the pod cannot start", last.Status.Phase, r.Status)
			}
			t.Logf("Ready: %s: %s", r.Reason, r.Message)

			// Once the pod runs and the commit ends, the snapshot goes on.
			e.SetTaskRunStatus(tr.Name, framework.Running)
			e.SetTaskRunStatus(tr.Name, framework.Succeeded(19, framework.DigestsFor(tr)...))
			s = e.WaitSnapshot(snap, "Succeed", framework.IsTerminal)
			if s.Status.Phase != v1alpha1.PhaseSucceed {
				t.Errorf("phase %s, want Succeed:\n%s", s.Status.Phase, framework.Dump(s.Status))
			}
			if r := framework.Condition(t, s, v1alpha1.ConditionReady); strings.Contains(r.Message, tc.why) {
				t.Errorf("Ready still says %q after the commit succeeded", r.Message)
			}
		})
	}
}
