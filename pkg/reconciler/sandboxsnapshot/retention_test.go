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
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	fakepipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"knative.dev/pkg/controller"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// retentionFixture holds the objects the retention rows are made of.
type retentionFixture struct {
	trNamespace, trName, unpauseName string
	committing                       SnapshotOption
}

func newRetentionFixture() retentionFixture {
	return retentionFixture{
		trNamespace: system.Namespace(),
		trName:      "team-a-snap-05307b-commit",
		unpauseName: "team-a-snap-05307b-unpause",
		committing:  WithCommitting("sb-0", node, committed, system.Namespace(), "team-a-snap-05307b-commit"),
	}
}

func (f retentionFixture) snap(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
	return Snapshot(ns, snapName, sbName, append([]SnapshotOption{WithFinalizers(FinalizerName)}, opts...)...)
}

func (f retentionFixture) commit(opts ...TaskRunOption) *pipelinev1.TaskRun {
	src := resources.Source{Pod: runningPod, Containers: committed}
	return TaskRun(resources.MakeTaskRun(f.snap(), src, defaultCfg, f.trNamespace), opts...)
}

func (f retentionFixture) unpause(opts ...TaskRunOption) *pipelinev1.TaskRun {
	return TaskRun(resources.MakeUnpauseTaskRun(f.snap(), runningPod, defaultCfg, f.trNamespace), opts...)
}

// succeededCommit is a commit TaskRun that completed ago.
func (f retentionFixture) succeededCommit(ago time.Duration) *pipelinev1.TaskRun {
	return f.commit(WithTaskRunSucceeded, WithResult(task.ResultDigests, digestA+","+digestB),
		WithResult(task.ResultPauseWindowMS, "412"), WithCompletedAt(metav1.NewTime(Now.Add(-ago))))
}

func (f retentionFixture) removedEvent(name, completed, retention, key string) string {
	return rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonTaskRunRemoved,
		"Deleted TaskRun %s/%s and its pod, complete since %s, after the %s of config-snapshot %s; status.containers keeps the image digests",
		f.trNamespace, name, completed, retention, key)
}

// withRemoved records the TaskRuns retention deleted, at Now.
func withRemoved(namespace string, names ...string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		for _, n := range names {
			s.Status.MarkTaskRunRemoved(Now, v1alpha1.TaskRunReference{Namespace: namespace, Name: n})
		}
	}
}

// retentionConfig is the default config with the given retention keys.
func retentionConfig(kv ...string) map[string]string {
	data := map[string]string{config.RegistryKey: registryPrefix}
	for i := 0; i+1 < len(kv); i += 2 {
		data[kv[i]] = kv[i+1]
	}
	return data
}

func TestRetention(t *testing.T) {
	f := newRetentionFixture()
	succeed := WithSucceeded(412, digestA, digestB)
	failedKilled := WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")
	sixMinutesAgo := Now.Add(-6 * time.Minute).UTC().Format(time.RFC3339)
	twoHoursAgo := Now.Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	failedCommit := func(ago time.Duration) *pipelinev1.TaskRun {
		return f.commit(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), WithCompletedAt(metav1.NewTime(Now.Add(-ago))))
	}

	table := rtesting.TableTest{{
		Name:    "the TaskRun of a Succeed snapshot is kept within its retention, and looked at again when it is over",
		Objects: []runtime.Object{f.snap(f.committing, succeed), f.succeededCommit(time.Minute)},
		Key:     key,
		WantErr: true, // a requeue after 4m: TestRetentionRequeuesWhenDue
	}, {
		Name:        "the TaskRun of a Succeed snapshot is deleted, with its pod, once its retention is over",
		Objects:     []runtime.Object{f.snap(f.committing, succeed), f.succeededCommit(6 * time.Minute)},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: f.snap(f.committing, succeed, withRemoved(f.trNamespace, f.trName)),
		}},
		WantEvents: []string{f.removedEvent(f.trName, sixMinutesAgo, "5m0s", config.TaskRunRetentionSucceededKey)},
	}, {
		Name:        "retention 0 deletes the TaskRun of a Succeed snapshot at once",
		Ctx:         withConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "0")),
		Objects:     []runtime.Object{f.snap(f.committing, succeed), f.succeededCommit(0)},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: f.snap(f.committing, succeed, withRemoved(f.trNamespace, f.trName)),
		}},
		WantEvents: []string{f.removedEvent(f.trName, Now.UTC().Format(time.RFC3339), "0s", config.TaskRunRetentionSucceededKey)},
	}, {
		Name:    "retention -1 keeps the TaskRun until the snapshot is deleted",
		Ctx:     withConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "-1")),
		Objects: []runtime.Object{f.snap(f.committing, succeed), f.succeededCommit(1000 * time.Hour)},
		Key:     key,
	}, {
		Name:    "a Failed snapshot's TaskRuns follow the failed retention, not the succeeded one",
		Objects: []runtime.Object{f.snap(f.committing, failedKilled), failedCommit(6 * time.Minute)},
		Key:     key,
		WantErr: true, // a requeue: 24h less 6m
	}, {
		Name: "a Failed snapshot's commit and unpause TaskRuns go together, the commit first, once the later is past the retention",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionFailedKey, "1h")),
		Objects: []runtime.Object{f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled, WithThawed),
			failedCommit(3 * time.Hour), f.unpause(WithTaskRunSucceeded, WithCompletedAt(metav1.NewTime(Now.Add(-2*time.Hour))))},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName), deleteTaskRun(f.trNamespace, f.unpauseName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled, WithThawed, withRemoved(f.trNamespace, f.trName, f.unpauseName)),
		}},
		WantEvents: []string{
			f.removedEvent(f.trName, Now.Add(-3*time.Hour).UTC().Format(time.RFC3339), "1h0m0s", config.TaskRunRetentionFailedKey),
			f.removedEvent(f.unpauseName, twoHoursAgo, "1h0m0s", config.TaskRunRetentionFailedKey),
		},
	}, {
		Name: "a commit TaskRun past its retention is kept while its unpause TaskRun runs",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionFailedKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled),
			failedCommit(3 * time.Hour), f.unpause(WithTaskRunRunning)},
		Key: key,
	}, {
		Name: "the TaskRuns of a thaw that ended go once the thaw's outcome is recorded, in the same pass",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionFailedKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled),
			failedCommit(3 * time.Hour), f.unpause(WithTaskRunSucceeded, WithCompletedAt(Now))},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName), deleteTaskRun(f.trNamespace, f.unpauseName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled, WithThawed, withRemoved(f.trNamespace, f.trName, f.unpauseName)),
		}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonThawed, "TaskRun %s/%s unpaused pod sb-0", f.trNamespace, f.unpauseName),
			f.removedEvent(f.trName, Now.Add(-3*time.Hour).UTC().Format(time.RFC3339), "0s", config.TaskRunRetentionFailedKey),
			f.removedEvent(f.unpauseName, Now.UTC().Format(time.RFC3339), "0s", config.TaskRunRetentionFailedKey),
		},
	}, {
		Name: "the TaskRuns of a thaw under way are kept past their retention: they are what the thaw is followed by",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionFailedKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled), runningPod,
			failedCommit(3 * time.Hour), f.unpause(WithTaskRunRunning)},
		Key: key,
	}, {
		Name: "under OpenSandbox's CRD, which prunes status.thaw, an ended unpause TaskRun is reported, then deleted with its commit",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionFailedKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, failedKilled, withoutOwnFields),
			failedCommit(time.Hour), f.unpause(WithTaskRunSucceeded, WithCompletedAt(Now))},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName), deleteTaskRun(f.trNamespace, f.unpauseName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			// The API server prunes what the controller adds here.
			Object: f.snap(f.committing, failedKilled, withoutOwnFields, func(s *v1alpha1.SandboxSnapshot) {
				s.Status.MarkThawed(v1alpha1.TaskRunReference{Namespace: f.trNamespace, Name: f.unpauseName})
			}, withRemoved(f.trNamespace, f.trName, f.unpauseName)),
		}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonThawed, "TaskRun %s/%s unpaused pod sb-0", f.trNamespace, f.unpauseName),
			f.removedEvent(f.trName, Now.Add(-time.Hour).UTC().Format(time.RFC3339), "0s", config.TaskRunRetentionFailedKey),
			f.removedEvent(f.unpauseName, Now.UTC().Format(time.RFC3339), "0s", config.TaskRunRetentionFailedKey),
		},
	}, {
		Name:    "a TaskRun already being deleted is left to go",
		Ctx:     withConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, succeed), TaskRun(f.succeededCommit(time.Hour), WithTaskRunDeleting)},
		Key:     key,
	}, {
		Name: "a TaskRun of an earlier snapshot of the same name is not this snapshot's to remove",
		Ctx:  withConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "0")),
		Objects: []runtime.Object{f.snap(f.committing, succeed), TaskRun(f.succeededCommit(time.Hour), func(tr *pipelinev1.TaskRun) {
			tr.Labels[sandbox.SnapshotUIDLabel] = "earlier-uid"
		})},
		Key: key,
	}, {
		Name:         "a failed TaskRun delete is retried",
		Ctx:          withConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "0")),
		Objects:      []runtime.Object{f.snap(f.committing, succeed), f.succeededCommit(time.Hour)},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("delete", "taskruns")},
		WantErr:      true,
		WantDeletes:  []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"deleting TaskRun %s/%s: inducing failure for delete taskruns", f.trNamespace, f.trName)},
	},
		// A snapshot whose TaskRuns retention removed must never start one
		// again, on any path that finds TaskRuns by their deterministic names.
		{
			Name:    "a Succeed snapshot whose TaskRun was removed starts no TaskRun and keeps its phase and digests",
			Objects: []runtime.Object{f.snap(f.committing, succeed, withRemoved(f.trNamespace, f.trName)), BatchSandbox(ns, sbName, 1), runningPod},
			Key:     key,
		}, {
			Name:    "the same under OpenSandbox's CRD, where nothing records the removal but the phase",
			Objects: []runtime.Object{f.snap(f.committing, succeed, withoutOwnFields), BatchSandbox(ns, sbName, 1), runningPod},
			Key:     key,
		}, {
			Name:    "a Failed snapshot whose TaskRuns were removed starts no thaw and keeps its reported thaw",
			Objects: []runtime.Object{f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), failedKilled, WithThawed, withRemoved(f.trNamespace, f.trName, f.unpauseName)), runningPod},
			Key:     key,
		}, {
			Name:    "a Failed snapshot whose TaskRuns were removed under OpenSandbox's CRD starts no thaw",
			Objects: []runtime.Object{f.snap(f.committing, failedKilled, withoutOwnFields), runningPod},
			Key:     key,
		}, {
			Name:                    "deleting a Failed snapshot whose TaskRuns were removed starts no unpause TaskRun",
			Objects:                 []runtime.Object{f.snap(f.committing, failedKilled, withoutOwnFields, WithDeletionTimestamp), runningPod},
			Key:                     key,
			SkipNamespaceValidation: true,
			WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		}, {
			Name:                    "deleting a Succeed snapshot whose TaskRun was removed releases what it kept on its node, and drops the finalizer",
			Objects:                 []runtime.Object{f.snap(f.committing, succeed, WithDeletionTimestamp)},
			Key:                     key,
			SkipNamespaceValidation: true,
			WantCreates:             []runtime.Object{resources.MakeReleaseTaskRun(f.snap(f.committing, succeed), defaultCfg, f.trNamespace)},
			WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		}}

	table.Test(t, MakeFactory(newReconciler))
}

// TestRetentionRequeuesWhenDue checks the timer: a snapshot whose TaskRuns
// are within their retention is looked at again exactly when it is over.
func TestRetentionRequeuesWhenDue(t *testing.T) {
	f := newRetentionFixture()
	for _, tc := range []struct {
		name string
		snap *v1alpha1.SandboxSnapshot
		trs  []runtime.Object
		want time.Duration
	}{{
		name: "succeeded, 1m into 5m",
		snap: f.snap(f.committing, WithSucceeded(412, digestA, digestB)),
		trs:  []runtime.Object{f.succeededCommit(time.Minute)},
		want: 4 * time.Minute,
	}, {
		name: "failed, the later of two TaskRuns counts",
		snap: f.snap(f.committing, WithUnpauseTaskRun(f.trNamespace, f.unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawed),
		trs: []runtime.Object{
			f.commit(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), WithCompletedAt(metav1.NewTime(Now.Add(-3*time.Hour)))),
			f.unpause(WithTaskRunSucceeded, WithCompletedAt(metav1.NewTime(Now.Add(-time.Hour)))),
		},
		want: 23 * time.Hour,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ls := NewListers(append([]runtime.Object{tc.snap}, tc.trs...))
			r := &Reconciler{taskRunIndex: ls.Indexer(&pipelinev1.TaskRun{}, taskRunIndexers), clock: newReconcilerClock(), namespace: f.trNamespace}
			ctx := config.ToContext(t.Context(), &config.Config{Snapshot: defaultCfg})
			got := r.retainTaskRuns(ctx, tc.snap.DeepCopy())
			ok, d := controller.IsRequeueKey(got)
			if !ok || d != tc.want {
				t.Errorf("retainTaskRuns() = %v, want a requeue after %v", got, tc.want)
			}
		})
	}
}

// newReconcilerClock is the table tests' fake clock.
func newReconcilerClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(Now.Time)
}

// TestRetentionFreesTheCommitGate: a commit TaskRun created by this
// controller and deleted after its retention before the gate looked again
// does not hold the next commit of its pod, as if the informer had not seen
// it yet.
func TestRetentionFreesTheCommitGate(t *testing.T) {
	f := newRetentionFixture()
	tr := f.succeededCommit(time.Hour)
	s := f.snap(f.committing, WithSucceeded(412, digestA, digestB))
	ls := NewListers([]runtime.Object{s, tr})
	r := &Reconciler{
		taskRunIndex:   ls.Indexer(&pipelinev1.TaskRun{}, taskRunIndexers),
		pipelineClient: fakepipelineclientset.NewSimpleClientset(ls.GetPipelineObjects()...),
		clock:          newReconcilerClock(),
		namespace:      f.trNamespace,
		commits:        newCommitGate(),
	}
	tr.CreationTimestamp = Now
	r.commits.created(tr)
	ctx := config.ToContext(t.Context(), &config.Config{Snapshot: mustConfig(retentionConfig(config.TaskRunRetentionSucceededKey, "0"))})
	ctx = controller.WithEventRecorder(ctx, record.NewFakeRecorder(10))
	if err := r.retainTaskRuns(ctx, s.DeepCopy()); err != nil {
		t.Fatalf("retainTaskRuns() = %v", err)
	}
	// The informer no longer has it; nor will it ever.
	next := Snapshot(ns, "next", sbName)
	if b := r.commits.holder(nil, runningPod.UID, next, Now.Time); b != nil {
		t.Errorf("holder() = %q after the TaskRun was deleted, want nil", b.holder)
	}
}
