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
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// ctrState is what a test compares before and after a refused run.
type ctrState struct {
	status client.ProcessStatus
	labels map[string]string
}

func (e *testEnv) states(t *testing.T, p *runningPod) map[string]ctrState {
	t.Helper()
	ctx := e.ctrd.Ctx(context.Background())
	out := map[string]ctrState{}
	for n, tk := range p.tasks {
		st, err := tk.Status(ctx)
		if err != nil {
			t.Fatalf("container %s: status: %v", n, err)
		}
		labels, err := p.ctrs[n].Labels(ctx)
		if err != nil {
			t.Fatalf("container %s: labels: %v", n, err)
		}
		out[n] = ctrState{status: st.Status, labels: labels}
	}
	return out
}

func assertSameStates(t *testing.T, before, after map[string]ctrState) {
	t.Helper()
	for n, b := range before {
		a := after[n]
		if a.status != b.status {
			t.Errorf("container %s went from %s to %s", n, b.status, a.status)
		}
		if !maps.Equal(a.labels, b.labels) {
			t.Errorf("container %s labels changed from %v to %v", n, b.labels, a.labels)
		}
	}
}

// TestConcurrentRunsOnePod starts two commits of one pod at the same instant.
// The pause hook of whichever run gets in holds the pause window open until
// the other run has returned, so the two always overlap: exactly one commits,
// the other fails with freeze.ErrFrozenElsewhere having written nothing.
func TestConcurrentRunsOnePod(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	for round := 0; round < 3; round++ {
		want := fmt.Sprintf("round-%d\n", round)
		p.writeFile(t, "app", "/data/round.txt", []byte(want))
		runs := []string{"run-a-" + randSuffix(), "run-b-" + randSuffix()}
		refs := make([]string, 2)
		cms := make([]*testCommitter, 2)
		errs := make([]error, 2)
		results := make([]*committer.CommitResult, 2)
		done := make([]chan struct{}, 2)
		start := make(chan struct{})
		for i := range cms {
			refs[i] = fmt.Sprintf("%s/snap/%s-%d-%d:1", e.regA.Host, p.name, round, i)
			params := p.params(t, true, "app="+refs[i], "sidecar="+sideRef(refs[i]))
			params.RunID = runs[i]
			done[i] = make(chan struct{})
			other := 1 - i
			cms[i] = e.committer(params, inPause(func(context.Context, []*freeze.Container) error {
				select {
				case <-done[other]:
					return nil
				case <-time.After(30 * time.Second):
					return errors.New("the other run did not finish while this one held the pause")
				}
			}))
		}
		var wg sync.WaitGroup
		for i := range cms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(done[i])
				<-start
				results[i], errs[i] = cms[i].Commit(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		t.Logf("round %d: run %s: %v; run %s: %v", round, runs[0], errs[0], runs[1], errs[1])
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: want exactly one successful run, got errors %v and %v", round, errs[0], errs[1])
		}
		win, lose := 0, 1
		if errs[0] != nil {
			win, lose = 1, 0
		}
		if !errors.Is(errs[lose], freeze.ErrFrozenElsewhere) || !strings.Contains(errs[lose].Error(), p.namespace+"/"+p.name) ||
			!strings.Contains(errs[lose].Error(), "another sandbox-commit run") {
			t.Errorf("round %d: losing run's error %v is not a frozen-elsewhere error naming the pod", round, errs[lose])
		}
		e.assertAllRunning(t, p)
		lost := cms[lose].workingName(cms[lose].cfg.Params.Targets[0])
		if _, err := e.ctrd.Client.ImageService().Get(ctx, lost); !errdefs.IsNotFound(err) {
			t.Errorf("round %d: the losing run left an image %s (err %v)", round, lost, err)
		}
		if len(results[win].Images) != 2 {
			t.Fatalf("round %d: winner committed %d images", round, len(results[win].Images))
		}
		pushed, _, err := cms[win].Push(context.Background())
		if err != nil {
			t.Fatalf("round %d: push: %v", round, err)
		}
		if got := registryDigest(t, refs[win]); got != pushed[0].Digest {
			t.Errorf("round %d: registry holds %s, pushed %s", round, got, pushed[0].Digest)
		}
		if got := string(lastLayerFiles(t, refs[win])["data/round.txt"]); got != want {
			t.Errorf("round %d: pushed layer holds %q, want %q", round, got, want)
		}
	}
}

// TestForeignPauseRefused pauses a target container outside the committer,
// with no marker: the commit step exits with ExitCodeFrozenElsewhere, names
// the container, and leaves every container exactly as it was.
func TestForeignPauseRefused(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	if err := p.tasks["sidecar"].Pause(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.tasks["sidecar"].Resume(ctx)
	before := e.states(t, p)
	results := t.TempDir()
	cmd, out := e.binCmd(t, p, "commit", "commit", "true", "", results,
		"app="+e.regA.Host+"/snap/foreign:1", "sidecar="+e.regA.Host+"/snap/foreign-side:1")
	err := cmd.Run()
	t.Logf("committer output:\n%s", out)
	if code := cmd.ProcessState.ExitCode(); err == nil || code != task.ExitCodeFrozenElsewhere {
		t.Fatalf("exit code %d (err %v), want %d", code, err, task.ExitCodeFrozenElsewhere)
	}
	msg := readResult(t, results, "ERROR")
	t.Logf("ERROR result: %s", msg)
	for _, w := range []string{"without a " + freeze.LabelPausedBy + " marker", `container "sidecar"`, p.namespace + "/" + p.name} {
		if !strings.Contains(msg, w) {
			t.Errorf("ERROR result lacks %q", w)
		}
	}
	assertSameStates(t, before, e.states(t, p))
}

// TestDeadRunsPauseThawed leaves a container paused with another run's
// marker and no lock held, as a commit killed mid-pause whose snapshot's
// finalizer was forced off does: the next commit thaws it, commits, and
// leaves the pod running, where it exited 4 and every later commit failed.
func TestDeadRunsPauseThawed(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeFile(t, "sidecar", "/data/state.txt", []byte("before the kill\n"))
	dead := "run-dead-" + randSuffix()
	if _, err := p.ctrs["sidecar"].SetLabels(ctx, map[string]string{freeze.LabelPausedBy: dead}); err != nil {
		t.Fatal(err)
	}
	if err := p.tasks["sidecar"].Pause(ctx); err != nil {
		t.Fatal(err)
	}
	ref := e.regA.Host + "/snap/" + p.name + "-dead:1"
	var out strings.Builder
	c := e.committer(p.params(t, true, "app="+ref, "sidecar="+sideRef(ref)), func(cfg *committer.Config) { cfg.Log = &out })
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	e.assertAllRunning(t, p)
	if !strings.Contains(out.String(), "left paused by run "+dead) {
		t.Errorf("the committer did not say it thawed what run %s left paused; its log:\n%s", dead, out.String())
	}
	if _, _, err := c.Push(context.Background()); err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := string(lastLayerFiles(t, sideRef(ref))["data/state.txt"]); got != "before the kill\n" {
		t.Errorf("committed layer holds %q", got)
	}
}

// TestUnpauseOwnRunOnly leaves two containers paused by run X and one by run
// Y, as killed commits would: unpause with run ID X thaws X's only, and Y's
// stays paused with its marker until unpause with run ID Y.
func TestUnpauseOwnRunOnly(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase}, podContainer{"other", e.dockerBase})
	runX, runY := "run-x-"+randSuffix(), "run-y-"+randSuffix()
	for n, run := range map[string]string{"app": runX, "sidecar": runX, "other": runY} {
		if _, err := p.ctrs[n].SetLabels(ctx, map[string]string{freeze.LabelPausedBy: run}); err != nil {
			t.Fatal(err)
		}
		if err := p.tasks[n].Pause(ctx); err != nil {
			t.Fatal(err)
		}
	}
	unpause := func(run string) int {
		t.Helper()
		pp, err := task.ParseParams(task.RawParams{PodName: p.name, PodNamespace: p.namespace, PodUID: p.uid, RunID: run, InsecureRegistry: "false", Mode: task.ModeUnpause})
		if err != nil {
			t.Fatal(err)
		}
		n, err := e.committer(pp).Unpause(context.Background())
		if err != nil {
			t.Fatalf("unpause %s: %v", run, err)
		}
		return n
	}
	if n := unpause(runX); n != 2 {
		t.Errorf("unpause %s thawed %d containers, want 2", runX, n)
	}
	after := e.states(t, p)
	for _, n := range []string{"app", "sidecar"} {
		if after[n].status != client.Running || after[n].labels[freeze.LabelPausedBy] != "" {
			t.Errorf("container %s: %s with marker %q after unpause %s", n, after[n].status, after[n].labels[freeze.LabelPausedBy], runX)
		}
	}
	if after["other"].status != client.Paused || after["other"].labels[freeze.LabelPausedBy] != runY {
		t.Errorf("container other (run %s) is %s with marker %q after unpause %s", runY, after["other"].status, after["other"].labels[freeze.LabelPausedBy], runX)
	}
	if n := unpause(runY); n != 1 {
		t.Errorf("unpause %s thawed %d containers, want 1", runY, n)
	}
	e.assertAllRunning(t, p)
}

// TestPodUIDSelection runs a newer container under the same pod name,
// namespace and container name but another pod UID, as a re-created pod
// would have: the commit ignores it and takes the one of its own pod.
func TestPodUIDSelection(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	p.writeFile(t, "app", "/data/who.txt", []byte("pod-uid-1\n"))
	otherUID := "uid-other-" + randSuffix()
	other, otherTask, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: p.name + "-app-newpod", Pod: p.name, PodNamespace: p.namespace, PodUID: otherUID, Name: "app", Image: e.dockerBase}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.ctrd.DeleteContainer(ctx, other)
	impostor := &runningPod{ctrs: map[string]client.Container{"app": other}, tasks: map[string]client.Task{"app": otherTask}}
	impostor.writeFile(t, "app", "/data/who.txt", []byte("pod-uid-2\n"))
	impostorBefore := e.states(t, impostor)

	ref := e.regA.Host + "/snap/" + p.name + "-uid:1"
	c := e.committer(p.params(t, true, "app="+ref), inPause(func(ctx context.Context, _ []*freeze.Container) error {
		if st, err := otherTask.Status(ctx); err != nil || st.Status != client.Running {
			return fmt.Errorf("the other pod's container is %s (%v) inside the pause window", st.Status, err)
		}
		return nil
	}))
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, _, err := c.Push(context.Background()); err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := string(lastLayerFiles(t, ref)["data/who.txt"]); got != "pod-uid-1\n" {
		t.Errorf("committed layer holds who.txt %q, want the file of pod uid %s", got, p.uid)
	}
	assertSameStates(t, impostorBefore, e.states(t, impostor))
	e.assertAllRunning(t, p)

	// A container that exists only under the other UID is not found.
	ghost := p.params(t, true, "app="+ref)
	ghost.PodUID = "uid-absent-" + randSuffix()
	if _, err := e.committer(ghost).Commit(context.Background()); err == nil || !strings.Contains(err.Error(), "no running container") {
		t.Errorf("commit with an unknown pod UID: %v, want no running container", err)
	}
}

// TestOwnRunPausedAdopted leaves a container paused with this run's own
// marker, as a killed earlier attempt of the same run (a TaskRun retry)
// would: the run commits it as it is and thaws it with the others.
func TestOwnRunPausedAdopted(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeFile(t, "app", "/data/adopted.txt", []byte("adopted\n"))
	if _, err := p.ctrs["app"].SetLabels(ctx, map[string]string{freeze.LabelPausedBy: p.runID}); err != nil {
		t.Fatal(err)
	}
	if err := p.tasks["app"].Pause(ctx); err != nil {
		t.Fatal(err)
	}
	ref := e.regA.Host + "/snap/" + p.name + "-adopted:1"
	c := e.committer(p.params(t, true, "app="+ref, "sidecar="+sideRef(ref)), inPause(func(ctx context.Context, _ []*freeze.Container) error {
		for n, tk := range p.tasks {
			if st, err := tk.Status(ctx); err != nil || st.Status != client.Paused {
				return fmt.Errorf("container %s is %s (%v) inside the pause window", n, st.Status, err)
			}
		}
		return nil
	}))
	if _, err := c.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	e.assertAllRunning(t, p)
	if _, _, err := c.Push(context.Background()); err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := string(lastLayerFiles(t, ref)["data/adopted.txt"]); got != "adopted\n" {
		t.Errorf("committed layer holds %q", got)
	}
}

// TestConcurrentProcesses starts two committer processes on one pod at the
// same time, like two TaskRuns of different snapshots. A 64 MiB diff keeps
// the winner's pause window open far longer than the processes' start-up
// skew. Exactly one exits 0 and pushes; the other exits
// ExitCodeFrozenElsewhere with an ERROR naming the pod, and pushes nothing.
func TestConcurrentProcesses(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeBig(t, "app", "/data/big.bin", 64<<20)
	p.writeFile(t, "app", "/data/state.txt", []byte("both-runs-see-this\n"))
	type proc struct {
		cmd     *exec.Cmd
		out     *bytes.Buffer
		results string
		ref     string
	}
	procs := make([]proc, 2)
	for i := range procs {
		p.runID = fmt.Sprintf("run-proc%d-%s", i, randSuffix())
		procs[i].results = t.TempDir()
		procs[i].ref = fmt.Sprintf("%s/snap/%s-proc%d:1", e.regA.Host, p.name, i)
		procs[i].cmd, procs[i].out = e.binCmd(t, p, "all", "commit", "true", "", procs[i].results, "app="+procs[i].ref, "sidecar="+sideRef(procs[i].ref))
	}
	for i := range procs {
		if err := procs[i].cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	codes := make([]int, 2)
	for i := range procs {
		_ = procs[i].cmd.Wait()
		codes[i] = procs[i].cmd.ProcessState.ExitCode()
		t.Logf("process %d exited %d:\n%s", i, codes[i], procs[i].out)
	}
	win, lose := 0, 1
	if codes[0] != 0 {
		win, lose = 1, 0
	}
	if codes[win] != 0 || codes[lose] != task.ExitCodeFrozenElsewhere {
		t.Fatalf("exit codes %v, want one 0 and one %d", codes, task.ExitCodeFrozenElsewhere)
	}
	msg := readResult(t, procs[lose].results, "ERROR")
	t.Logf("losing ERROR result: %s", msg)
	if !strings.Contains(msg, "another sandbox-commit run") || !strings.Contains(msg, p.namespace+"/"+p.name) {
		t.Errorf("ERROR result %q does not name the pod and the run in flight", msg)
	}
	e.assertAllRunning(t, p)
	if got := string(lastLayerFiles(t, procs[win].ref)["data/state.txt"]); got != "both-runs-see-this\n" {
		t.Errorf("winner's pushed layer holds %q", got)
	}
	if got := readResult(t, procs[win].results, "DIGESTS"); got == "" || registryDigest(t, procs[win].ref) != strings.Split(got, ",")[0] {
		t.Errorf("winner's DIGESTS %q do not match the registry", got)
	}
	r, err := name.ParseReference(procs[lose].ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(r); err == nil {
		t.Errorf("the losing run pushed %s", procs[lose].ref)
	}
}
