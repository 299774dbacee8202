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
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// metricReaderKey carries, in a table row's context, the reader that the
// row's reconciler records its metrics to.
type metricReaderKey struct{}

// testMetrics makes the reconciler's metrics on the listers of a table row,
// read by the row context's reader, or by none.
func testMetrics(ctx context.Context, ls *Listers) *metrics {
	reader, ok := ctx.Value(metricReaderKey{}).(sdkmetric.Reader)
	if !ok {
		reader = sdkmetric.NewManualReader()
	}
	m, err := newMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(meterName),
		ls.GetSandboxSnapshotLister(), ls.GetTaskRunLister().TaskRuns(system.Namespace()), func(any) bool { return true })
	if err != nil {
		panic(err)
	}
	return m
}

// collect reads what reader holds of the controller's own scope.
func collect(t *testing.T, reader sdkmetric.Reader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == meterName {
			return sm.Metrics
		}
	}
	return nil
}

// histograms summarizes every histogram data point reader holds, one line
// each: "name{key=value,...} count=N sum=S".
func histograms(t *testing.T, reader sdkmetric.Reader) []string {
	t.Helper()
	var out []string
	for _, m := range collect(t, reader) {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			for _, dp := range h.DataPoints {
				out = append(out, fmt.Sprintf("%s{%s} count=%d sum=%g", m.Name, attrs(dp.Attributes), dp.Count, dp.Sum))
			}
		}
	}
	slices.Sort(out)
	return out
}

// gauges reads every gauge data point reader holds: "name{key=value,...}" → value.
func gauges(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range collect(t, reader) {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok {
			for _, dp := range g.DataPoints {
				out[m.Name+"{"+attrs(dp.Attributes)+"}"] = dp.Value
			}
		}
	}
	return out
}

// attrs writes a set of attributes as key=value,... in key order.
func attrs(set attribute.Set) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, ",")
}

// TestMetricsRecordEachTerminalPhaseOnce checks what a pass records: a
// snapshot's end once, by the pass whose status write moved it into its
// terminal phase, and its commit TaskRun's creation by the pass that created it.
func TestMetricsRecordEachTerminalPhaseOnce(t *testing.T) {
	trNamespace := system.Namespace()
	trName := "team-a-snap-05307b-commit"
	created := WithCreationTimestamp(metav1.NewTime(Now.Add(-90 * time.Second)))
	snap := func(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return Snapshot(ns, snapName, sbName, append([]SnapshotOption{WithFinalizers(FinalizerName), created}, opts...)...)
	}
	committing := WithCommitting("sb-0", node, committed, trNamespace, trName)
	commitTaskRun := func(opts ...TaskRunOption) *pipelinev1.TaskRun {
		src := resources.Source{Pod: runningPod, Containers: committed}
		return TaskRun(resources.MakeTaskRun(snap(), src, defaultCfg, trNamespace), opts...)
	}
	// ran15s: the commit TaskRun started 20s ago and took 15s.
	ran15s := []TaskRunOption{WithStartedAt(metav1.NewTime(Now.Add(-20 * time.Second))), WithCompletedAt(metav1.NewTime(Now.Add(-5 * time.Second)))}
	succeededRun := commitTaskRun(append(ran15s, WithTaskRunSucceeded,
		WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"))...)
	timedOutMessage := "TaskRun " + trNamespace + "/" + trName + " failed (TaskRunTimeout): too slow; see: tkn taskrun logs " + trName + " -n " + trNamespace

	succeeded := []string{
		"sandbox_snapshot_commit_duration_seconds{status=succeeded} count=1 sum=15",
		"sandbox_snapshot_duration_seconds{reason=Succeeded,status=succeeded} count=1 sum=90",
		"sandbox_snapshot_pause_window_seconds{} count=1 sum=0.412",
	}
	rows := []struct {
		row  rtesting.TableRow
		want []string
	}{{
		row: rtesting.TableRow{
			Name:              "a snapshot that succeeds records its duration, pause window and commit duration",
			Objects:           []runtime.Object{snap(committing), succeededRun},
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(412, digestA, digestB))}},
		},
		want: succeeded,
	}, {
		row: rtesting.TableRow{
			Name:    "a failed commit records its reason, and no pause window",
			Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(append(ran15s, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "too slow"))...)},
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
				Object: snap(committing, WithFailed(v1alpha1.ReasonCommitTimedOut, timedOutMessage)),
			}},
			WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitTimedOut, "%s", timedOutMessage)},
		},
		want: []string{
			"sandbox_snapshot_commit_duration_seconds{status=failed} count=1 sum=15",
			"sandbox_snapshot_duration_seconds{reason=CommitTimedOut,status=failed} count=1 sum=90",
		},
	}, {
		row: rtesting.TableRow{
			Name:    "a snapshot that fails before any TaskRun records no commit duration",
			Objects: []runtime.Object{snap(), runningPod},
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
				Object: snap(WithFailed(v1alpha1.ReasonBatchSandboxLookupFailed, "BatchSandbox team-a/sb not found")),
			}},
			WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonBatchSandboxLookupFailed, "BatchSandbox team-a/sb not found")},
		},
		want: []string{"sandbox_snapshot_duration_seconds{reason=BatchSandboxLookupFailed,status=failed} count=1 sum=90"},
	}, {
		row: rtesting.TableRow{
			Name:    "a pass over a terminal snapshot, as a resync makes, records nothing",
			Objects: []runtime.Object{snap(committing, WithSucceeded(412, digestA, digestB)), succeededRun},
			WantErr: true, // the requeue for the end of the TaskRun's retention (retention_test.go)
		},
	}, {
		row: rtesting.TableRow{
			Name:         "a status write retried after a conflict records once",
			Objects:      []runtime.Object{snap(committing), succeededRun},
			WithReactors: []clientgotesting.ReactionFunc{conflictOnce()},
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{
				{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
				{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
			},
		},
		want: succeeded,
	}, {
		row: rtesting.TableRow{
			Name:    "a terminal phase another writer recorded first is not recorded again",
			Objects: []runtime.Object{snap(committing), succeededRun},
			WithReactors: []clientgotesting.ReactionFunc{conflictOnce(),
				getSnapshot(snap(committing, WithSucceeded(412, digestA, digestB)))},
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{
				{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
				{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
			},
		},
	}, {
		row: rtesting.TableRow{
			Name:                    "creating the commit TaskRun records its latency",
			Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
			SkipNamespaceValidation: true,
			WantCreates:             []runtime.Object{commitTaskRun()},
			WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
		},
		want: []string{"sandbox_snapshot_taskrun_creation_latency_seconds{} count=1 sum=90"},
	}, {
		row: rtesting.TableRow{
			Name:                    "adopting a TaskRun that an earlier pass created records no latency",
			Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod, commitTaskRun(WithTaskRunRunning)},
			SkipNamespaceValidation: true,
			WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
		},
	}}

	var table rtesting.TableTest
	for _, r := range rows {
		reader := sdkmetric.NewManualReader()
		row := r.row
		row.Key = key
		row.Ctx = context.WithValue(context.Background(), metricReaderKey{}, sdkmetric.Reader(reader))
		want := r.want
		row.PostConditions = []func(*testing.T, *rtesting.TableRow){func(t *testing.T, _ *rtesting.TableRow) {
			if diff := cmp.Diff(want, histograms(t, reader)); diff != "" {
				t.Errorf("recorded histograms (-want +got):\n%s", diff)
			}
		}}
		table = append(table, row)
	}
	table.Test(t, MakeFactory(newReconciler))
}

// TestMetricsGauges checks the gauges computed from the informers: the
// snapshots of this operator by phase, those waiting for another commit of
// their sandbox, and the commit TaskRuns in flight.
func TestMetricsGauges(t *testing.T) {
	trNamespace := system.Namespace()
	snapshot := func(name string, opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return Snapshot(ns, name, sbName, append([]SnapshotOption{WithFinalizers(FinalizerName)}, opts...)...)
	}
	commit := func(s *v1alpha1.SandboxSnapshot, opts ...TaskRunOption) *pipelinev1.TaskRun {
		return TaskRun(resources.MakeTaskRun(s, resources.Source{Pod: runningPod, Containers: committed}, defaultCfg, trNamespace), opts...)
	}
	committing := snapshot("committing", WithCommitting("sb-0", node, committed, trNamespace, "c"))
	done := snapshot("done", WithSucceeded(1, digestA, digestB))
	objects := []runtime.Object{
		snapshot("new"), // not reconciled yet: Pending
		snapshot("pending", WithPending),
		snapshot("waiting-1", WithWaiting("Waiting for SandboxSnapshot team-a/committing")),
		snapshot("waiting-2", WithWaiting("Waiting for SandboxSnapshot team-a/committing")),
		committing, done,
		snapshot("failed", WithFailed(v1alpha1.ReasonCommitTimedOut, "too slow")),
		// Another controller's snapshot is not counted.
		Snapshot(ns, "foreign", sbName, WithAnnotation(sandbox.ClassAnnotation, "opensandbox"), WithCommitting("sb-0", node, committed, trNamespace, "f")),
		commit(committing, WithTaskRunRunning),
		commit(snapshot("pending")), // just created: no condition yet
		commit(done, WithTaskRunSucceeded),
		// An unpause TaskRun is not a commit.
		resources.MakeUnpauseTaskRun(snapshot("failed"), runningPod, defaultCfg, trNamespace),
	}
	ls := NewListers(objects)
	reader := sdkmetric.NewManualReader()
	ours := func(obj any) bool { return obj.(*v1alpha1.SandboxSnapshot).Annotations[sandbox.ClassAnnotation] == "" }
	if _, err := newMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(meterName),
		ls.GetSandboxSnapshotLister(), ls.GetTaskRunLister().TaskRuns(trNamespace), ours); err != nil {
		t.Fatal(err)
	}

	want := map[string]int64{
		"sandbox_snapshot_snapshots{phase=Pending}":    4,
		"sandbox_snapshot_snapshots{phase=Committing}": 1,
		"sandbox_snapshot_snapshots{phase=Succeed}":    1,
		"sandbox_snapshot_snapshots{phase=Failed}":     1,
		"sandbox_snapshot_waiting_for_commit{}":        2,
		"sandbox_snapshot_commits_in_flight{}":         2,
	}
	if diff := cmp.Diff(want, gauges(t, reader)); diff != "" {
		t.Errorf("gauges (-want +got):\n%s", diff)
	}
}
