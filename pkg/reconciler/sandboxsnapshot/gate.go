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

package sandboxsnapshot

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
)

// thawGrace is how long a failed commit that may have left its pod paused
// keeps the pod's other commits waiting for its snapshot to start a thaw.
const thawGrace = 30 * time.Second

// informerGrace is how long the gate waits for the informer to see a TaskRun.
const informerGrace = time.Minute

// holderRecheck bounds a wait for a running TaskRun, should its end's event be lost.
const holderRecheck = time.Minute

// commitGate runs the commits of one pod one at a time: OpenSandbox makes two
// snapshots of a sandbox at once (its pause and a public snapshot), and two
// commits freezing and thawing one pod would corrupt each other. It relies on
// one leader for all snapshots; the committer's per-pod lock backs it up.
type commitGate struct {
	stripes [64]sync.Mutex

	mu sync.Mutex
	// recent holds each pod's last TaskRun until the informer has seen it.
	recent map[types.UID]*pipelinev1.TaskRun
}

func newCommitGate() *commitGate {
	return &commitGate{recent: map[types.UID]*pipelinev1.TaskRun{}}
}

// lock locks pod's stripe and returns its unlock.
func (g *commitGate) lock(pod types.UID) func() {
	h := fnv.New32a()
	h.Write([]byte(pod))
	m := &g.stripes[h.Sum32()%uint32(len(g.stripes))]
	m.Lock()
	return m.Unlock
}

// created remembers a TaskRun just created, until the informer has it.
func (g *commitGate) created(tr *pipelinev1.TaskRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent[types.UID(tr.Labels[sandbox.SourcePodUIDLabel])] = tr
}

// deleted forgets a TaskRun deleted here, lest it pass for one not yet seen.
func (g *commitGate) deleted(tr *pipelinev1.TaskRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	pod := types.UID(tr.Labels[sandbox.SourcePodUIDLabel])
	if recent, ok := g.recent[pod]; ok && recent.Name == tr.Name {
		delete(g.recent, pod)
	}
}

// blocker says whom a snapshot waits for, and when to look again.
type blocker struct {
	holder  string
	recheck time.Duration
}

// holder returns what keeps s from committing pod, or nil, given trs, the
// informer's TaskRuns of pod; call it with pod's lock held.
func (g *commitGate) holder(trs []*pipelinev1.TaskRun, pod types.UID, s *v1alpha1.SandboxSnapshot, now time.Time) *blocker {
	for _, tr := range trs {
		if tr.Labels[sandbox.SnapshotUIDLabel] == string(s.UID) {
			continue
		}
		if !tr.IsDone() {
			return &blocker{holder: describe(tr), recheck: holderRecheck}
		}
		// A commit that may have left the pod paused: its snapshot starts
		// an unpause TaskRun (which then holds the pod) in a moment.
		if end := tr.Status.CompletionTime; resources.IsCommit(tr) && !tr.IsSuccessful() && resources.MayHavePaused(tr) &&
			end != nil && now.Sub(end.Time) < thawGrace && !hasUnpause(trs, tr) {
			return &blocker{holder: describe(tr), recheck: thawGrace - now.Sub(end.Time)}
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	tr, ok := g.recent[pod]
	if !ok {
		return nil
	}
	if slices.ContainsFunc(trs, func(seen *pipelinev1.TaskRun) bool { return seen.Name == tr.Name }) ||
		now.Sub(tr.CreationTimestamp.Time) > informerGrace {
		// The informer has it now, or it was deleted before it ever arrived.
		delete(g.recent, pod)
		return nil
	}
	if tr.Labels[sandbox.SnapshotUIDLabel] == string(s.UID) {
		return nil
	}
	return &blocker{holder: describe(tr), recheck: holderRecheck}
}

// describe names the snapshot a TaskRun works for, and the TaskRun.
func describe(tr *pipelinev1.TaskRun) string {
	return fmt.Sprintf("SandboxSnapshot %s/%s (TaskRun %s/%s)", tr.Labels[sandbox.SnapshotNamespaceLabel],
		tr.Labels[sandbox.SnapshotNameLabel], tr.Namespace, tr.Name)
}

// hasUnpause reports whether trs hold an unpause TaskRun of commit's snapshot.
func hasUnpause(trs []*pipelinev1.TaskRun, commit *pipelinev1.TaskRun) bool {
	for _, tr := range trs {
		if !resources.IsCommit(tr) && tr.Labels[sandbox.SnapshotUIDLabel] == commit.Labels[sandbox.SnapshotUIDLabel] {
			return true
		}
	}
	return false
}
