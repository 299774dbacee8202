//go:build e2e_node

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

package e2enode

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

const (
	// reasonWaitingForCommit is the Ready reason of a snapshot held back
	// while another commit of the same pod runs.
	reasonWaitingForCommit = "WaitingForCommit"
	// writesLog is the file a process in the sandbox appends numbered lines to.
	writesLog = "/writes.log"
)

// writesLine is one complete line of writesLog: a sequence number and a
// fixed filler, so that a line cut short is told from a whole one.
var writesLine = regexp.MustCompile(`^([0-9]{8}) abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz$`)

// TestConcurrentSnapshotsOfOnePod creates two snapshots of one sandbox in the
// same instant while a process in it writes to its filesystem without pause.
// The operator must run their commits one after the other (the second held
// Pending, WaitingForCommit, naming the first), both must succeed, and each
// image must hold the files written before the snapshots and no torn line.
func TestConcurrentSnapshotsOfOnePod(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")

	markers := map[string]string{}
	for _, ctr := range pod.Spec.Containers {
		markers[ctr.Name] = nodeframework.RandomMarker(t, ctr.Name)
		// The marker goes in as an argument: kubectl exec may drop stdin.
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", ctr.Name, "--",
			"/bin/sh", "-c", `printf %s "$1" > /marker.txt && cat /marker.txt`, "sh", markers[ctr.Name])
	}
	// A large diff keeps the first commit busy long enough for the second
	// snapshot to be seen waiting.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=48 2>/dev/null")
	// The writer: one whole line per write, every 2 ms, detached from the exec.
	writer := `i=0; while :; do i=$((i+1)); printf '%08d abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\n' "$i" >> ` + writesLog + `; usleep 2000; done`
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", `setsid /bin/sh -c "$1" </dev/null >/dev/null 2>&1 & sleep 1`, "sh", writer)
	before := countLines(t, liveLines(t, ns, pod.Name), "the live sandbox")
	if before == 0 {
		t.Fatalf("the writer wrote nothing to %s in a second", writesLog)
	}

	// Watch the snapshots and their TaskRuns from before their creation:
	// every status the controller writes, and the TaskRun events in the
	// apiserver's order.
	names := []string{"snap-a", "snap-b"}
	obs := watchSnapshots(t, ns, names)
	trEvents := watchTaskRuns(t, ns)

	// Both snapshots at once: two goroutines released by one barrier.
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	errs := make([]error, len(names))
	for i, name := range names {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			s := &v1alpha1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: "sb"},
			}
			ready.Done()
			<-release
			_, errs[i] = nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(context.Background(), s, metav1.CreateOptions{})
		}()
	}
	ready.Wait()
	created := time.Now()
	close(release)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("creating %s: %v", names[i], err)
		}
	}

	final := obs.wait(t, nodeframework.SnapshotTimeout)
	for _, name := range names {
		if s := final[name]; s.Status.Phase != v1alpha1.PhaseSucceed {
			t.Fatalf("%s ended %s: %+v", name, s.Status.Phase, s.Status.Conditions)
		}
	}
	t.Logf("both snapshots Succeed %s after their creation", time.Since(created).Round(time.Millisecond))

	// One commit TaskRun each; which ran first is the controller's choice.
	trs := map[string]*pipelinev1.TaskRun{}
	for _, name := range names {
		trs[name] = commitTaskRunOf(t, ns, name)
	}
	first, second := names[0], names[1]
	if trEvents.addedBefore(trs[second].Name, trs[first].Name) {
		first, second = second, first
	}
	a, b := trs[first], trs[second]
	t.Logf("%s: TaskRun %s created %s, started %s, completed %s", first, a.Name,
		a.CreationTimestamp.Format(time.RFC3339), a.Status.StartTime.Format(time.RFC3339), a.Status.CompletionTime.Format(time.RFC3339))
	t.Logf("%s: TaskRun %s created %s, started %s, completed %s", second, b.Name,
		b.CreationTimestamp.Format(time.RFC3339), b.Status.StartTime.Format(time.RFC3339), b.Status.CompletionTime.Format(time.RFC3339))

	// No overlap: the second TaskRun was created only after the first had
	// finished, in the apiserver's own order of events (exact), and by the
	// TaskRuns' times (to the second, as the API stores them).
	if !trEvents.createdAfterDone(a.Name, b.Name) {
		t.Errorf("TaskRun %s of %s was created before TaskRun %s of %s had finished; events seen:\n%s",
			b.Name, second, a.Name, first, trEvents.String())
	}
	if b.CreationTimestamp.Before(a.Status.CompletionTime) || b.Status.StartTime.Before(a.Status.CompletionTime) {
		t.Errorf("TaskRun %s (created %s, started %s) overlaps TaskRun %s (completed %s)", b.Name,
			b.CreationTimestamp.Format(time.RFC3339), b.Status.StartTime.Format(time.RFC3339), a.Name, a.Status.CompletionTime.Format(time.RFC3339))
	}

	// The second was seen held back, naming the first.
	if msgs := obs.waiting[second]; len(msgs) == 0 {
		t.Errorf("%s was never seen Pending with Ready reason %s while %s committed; statuses seen: %v",
			second, reasonWaitingForCommit, first, obs.seen[second])
	} else if !strings.Contains(msgs[0], first) {
		t.Errorf("%s waited with message %q, which does not name %s", second, msgs[0], first)
	} else {
		t.Logf("%s waited: %q", second, msgs[0])
	}
	if msgs := obs.waiting[first]; len(msgs) != 0 {
		t.Logf("%s was also seen waiting (%q): the controller reconsidered the order", first, msgs[0])
	}

	// Resume each snapshot: the markers and every line written before the
	// snapshots are there, and every line is whole.
	lines := map[string]int{}
	for i, name := range []string{first, second} {
		resumed := nodeframework.ResumePod(t, ns, fmt.Sprintf("resumed-%d", i), final[name], 2*time.Minute)
		for ctr, want := range markers {
			if got := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", resumed, "-c", ctr, "--", "cat", "/marker.txt"); got != want {
				t.Errorf("%s: container %s resumed with marker %q, want %q", name, ctr, got, want)
			}
		}
		n := countLines(t, nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", resumed, "-c", "app", "--", "cat", writesLog), name+"'s image")
		if n < before {
			t.Errorf("%s's image holds %d lines of %s, but %d were written before the snapshot", name, n, writesLog, before)
		}
		lines[name] = n
	}
	if lines[second] < lines[first] {
		t.Errorf("%s (committed second) holds %d lines, fewer than %s (committed first, %d)", second, lines[second], first, lines[first])
	}
	t.Logf("lines of %s: %d before the snapshots, %d in %s, %d in %s", writesLog, before, lines[first], first, lines[second], second)

	// The sandbox runs on, unpaused, and its writer with it.
	nodeframework.AssertNotPaused(t, pod)
	after := countLines(t, liveLines(t, ns, pod.Name), "the live sandbox")
	if after <= lines[second] {
		t.Errorf("the writer stopped: %d lines now, %d in the second image", after, lines[second])
	}
}

// liveLines reads writesLog from the running sandbox, without the last line
// when the writer is in the middle of it.
func liveLines(t *testing.T, ns, pod string) string {
	t.Helper()
	text := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", "app", "--", "cat", writesLog)
	return text[:strings.LastIndex(text, "\n")+1]
}

// countLines checks that text is whole writesLog lines numbered 1, 2, 3...
// and returns how many there are.
func countLines(t *testing.T, text, where string) int {
	t.Helper()
	if text == "" {
		return 0
	}
	if !strings.HasSuffix(text, "\n") {
		t.Errorf("%s: %s ends in a torn line %q", where, writesLog, text[strings.LastIndex(text, "\n")+1:])
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, line := range lines {
		m := writesLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: line %d of %s is torn: %q", where, i+1, writesLog, line)
			return i
		}
		if n, _ := strconv.Atoi(m[1]); n != i+1 {
			t.Errorf("%s: line %d of %s is numbered %d", where, i+1, writesLog, n)
			return i
		}
	}
	return len(lines)
}

// commitTaskRunOf returns the one commit TaskRun of a snapshot, found by its
// labels (the snapshot's status may not name it: OpenSandbox's CRD prunes
// status.taskRunRef).
func commitTaskRunOf(t *testing.T, ns, snapshot string) *pipelinev1.TaskRun {
	t.Helper()
	var commits []*pipelinev1.TaskRun
	for _, tr := range nodeframework.TaskRunsOf(t, ns, snapshot) {
		for _, p := range tr.Spec.Params {
			if p.Name == task.ParamMode && p.Value.StringVal == task.ModeCommit {
				commits = append(commits, &tr)
			}
		}
	}
	if len(commits) != 1 {
		t.Fatalf("%s/%s has %d commit TaskRuns, want 1", ns, snapshot, len(commits))
	}
	tr := commits[0]
	if tr.Status.StartTime == nil || tr.Status.CompletionTime == nil {
		t.Fatalf("TaskRun %s has no start or completion time: %+v", tr.Name, tr.Status)
	}
	return tr
}

// snapshotObserver records every status seen of some snapshots.
type snapshotObserver struct {
	mu      sync.Mutex
	seen    map[string][]string // phase/reason, in order, deduplicated
	waiting map[string][]string // Ready messages while Pending/WaitingForCommit
	ready   map[string]string   // the last Ready message
	final   map[string]*v1alpha1.SandboxSnapshot
	done    chan error
}

// watchSnapshots starts watching the named snapshots of ns before they exist;
// wait returns them once all are terminal.
func watchSnapshots(t *testing.T, ns string, names []string) *snapshotObserver {
	t.Helper()
	o := &snapshotObserver{seen: map[string][]string{}, waiting: map[string][]string{}, ready: map[string]string{},
		final: map[string]*v1alpha1.SandboxSnapshot{}, done: make(chan error, 1)}
	lw := test.ListWatch(nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns), metav1.ListOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), nodeframework.SnapshotTimeout+time.Minute)
	t.Cleanup(cancel)
	synced := make(chan struct{})
	go func() {
		_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.SandboxSnapshot{}, func(cache.Store) (bool, error) {
			close(synced)
			return false, nil
		}, func(ev watch.Event) (bool, error) {
			s, ok := ev.Object.(*v1alpha1.SandboxSnapshot)
			if !ok || ev.Type == watch.Deleted {
				return false, nil
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			state := string(s.Status.Phase)
			if r := s.Status.GetCondition(v1alpha1.ConditionReady); r != nil {
				state += "/" + r.Reason
				o.ready[s.Name] = r.Message
				if s.Status.Phase == v1alpha1.PhasePending && r.Reason == reasonWaitingForCommit && r.Status == metav1.ConditionFalse {
					o.waiting[s.Name] = append(o.waiting[s.Name], r.Message)
				}
			}
			if seen := o.seen[s.Name]; len(seen) == 0 || seen[len(seen)-1] != state {
				o.seen[s.Name] = append(seen, state)
			}
			if s.Status.IsTerminal() {
				o.final[s.Name] = s.DeepCopy()
			}
			for _, name := range names {
				if o.final[name] == nil {
					return false, nil
				}
			}
			return true, nil
		})
		o.done <- err
	}()
	select {
	case <-synced:
	case err := <-o.done:
		t.Fatalf("watching the snapshots of %s: %v", ns, err)
	}
	return o
}

// wait waits until every watched snapshot is terminal and returns them.
func (o *snapshotObserver) wait(t *testing.T, timeout time.Duration) map[string]*v1alpha1.SandboxSnapshot {
	t.Helper()
	select {
	case err := <-o.done:
		if err != nil {
			o.mu.Lock()
			defer o.mu.Unlock()
			t.Fatalf("waiting for the snapshots to end: %v; statuses seen: %v; last Ready messages: %q", err, o.seen, o.ready)
		}
	case <-time.After(timeout):
		o.mu.Lock()
		defer o.mu.Unlock()
		t.Fatalf("the snapshots did not end within %v; statuses seen: %v; last Ready messages: %q", timeout, o.seen, o.ready)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.final
}

// taskRunEvents records the TaskRuns of one namespace's snapshots, event by
// event, in the order the apiserver serves them.
type taskRunEvents struct {
	mu     sync.Mutex
	events []string // "ADDED name" or "DONE name"
	done   map[string]bool
}

// watchTaskRuns starts recording the TaskRun events of ns's snapshots.
func watchTaskRuns(t *testing.T, ns string) *taskRunEvents {
	t.Helper()
	r := &taskRunEvents{done: map[string]bool{}}
	trs := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace)
	sel := metav1.ListOptions{LabelSelector: test.TaskRunSelector(ns, "")}
	list, err := trs.List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, test.ListWatch(trs, sel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			tr, ok := ev.Object.(*pipelinev1.TaskRun)
			if !ok {
				continue
			}
			r.mu.Lock()
			switch ev.Type {
			case watch.Added:
				r.events = append(r.events, "ADDED "+tr.Name)
			case watch.Modified:
				if cond := tr.Status.GetCondition(apis.ConditionSucceeded); cond != nil && !cond.IsUnknown() && !r.done[tr.Name] {
					r.done[tr.Name] = true
					r.events = append(r.events, "DONE "+tr.Name)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *taskRunEvents) index(event string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.events {
		if e == event {
			return i
		}
	}
	return -1
}

// createdAfterDone reports whether TaskRun b was added after TaskRun a was done.
func (r *taskRunEvents) createdAfterDone(a, b string) bool {
	done, added := r.index("DONE "+a), r.index("ADDED "+b)
	return done >= 0 && added > done
}

// addedBefore reports whether TaskRun a was added before TaskRun b.
func (r *taskRunEvents) addedBefore(a, b string) bool {
	ia, ib := r.index("ADDED "+a), r.index("ADDED "+b)
	return ia >= 0 && (ib < 0 || ia < ib)
}

func (r *taskRunEvents) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, "\n")
}
