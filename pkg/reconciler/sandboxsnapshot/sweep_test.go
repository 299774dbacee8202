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
	"testing"

	"github.com/google/go-cmp/cmp"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
)

// TestPromoteQueuesTaskRunsOfGoneSnapshots: a new leader queues, besides
// the snapshots that exist, the snapshot of each of its TaskRuns, so that
// the TaskRuns of a snapshot deleted while no leader ran are swept; not
// those of TaskRuns it does not manage, nor keys outside its bucket.
func TestPromoteQueuesTaskRunsOfGoneSnapshots(t *testing.T) {
	const trNamespace = "sandbox-snapshot-system"
	taskRun := func(name string, labels map[string]string) *pipelinev1.TaskRun {
		return &pipelinev1.TaskRun{ObjectMeta: metav1.ObjectMeta{Namespace: trNamespace, Name: name, Labels: labels}}
	}
	ours := func(ns, snapshot string) map[string]string {
		return map[string]string{sandbox.ManagedByLabel: sandbox.ManagedByValue, sandbox.SnapshotNamespaceLabel: ns, sandbox.SnapshotNameLabel: snapshot}
	}
	present := types.NamespacedName{Namespace: "team-a", Name: "present"}
	ls := NewListers([]runtime.Object{
		taskRun("gone-commit", ours("team-a", "gone")),
		taskRun("other-bucket-commit", ours("team-b", "elsewhere")),
		taskRun("foreign", map[string]string{sandbox.SnapshotNamespaceLabel: "team-a", sandbox.SnapshotNameLabel: "foreign"}),
	})
	generated := &reconciler.LeaderAwareFuncs{PromoteFunc: func(b reconciler.Bucket, enq func(reconciler.Bucket, types.NamespacedName)) error {
		enq(b, present)
		return nil
	}}
	g := goneSweeper{leaderAware: generated, r: &Reconciler{taskRunIndex: ls.Indexer(&pipelinev1.TaskRun{}, taskRunIndexers), namespace: trNamespace}}
	var queued []types.NamespacedName
	if err := g.Promote(teamABucket{}, func(_ reconciler.Bucket, key types.NamespacedName) { queued = append(queued, key) }); err != nil {
		t.Fatal(err)
	}
	want := []types.NamespacedName{present, {Namespace: "team-a", Name: "gone"}}
	if diff := cmp.Diff(want, queued); diff != "" {
		t.Errorf("queued on promotion (-want +got):\n%s", diff)
	}
}

// teamABucket holds the keys of namespace team-a.
type teamABucket struct{}

func (teamABucket) Name() string                      { return "team-a" }
func (teamABucket) Has(key types.NamespacedName) bool { return key.Namespace == "team-a" }
