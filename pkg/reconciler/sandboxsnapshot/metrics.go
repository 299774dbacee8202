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
	"errors"
	"fmt"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelinelisters "github.com/tektoncd/pipeline/pkg/client/listers/pipeline/v1"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	snapshotlisters "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/listers/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
)

// meterName is the instrumentation scope (otel_scope_name) of our metrics.
const meterName = "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot"

// The attributes of the controller's metrics. Their values come from small
// fixed sets: no metric carries a snapshot, sandbox, pod or namespace name.
const (
	// statusKey is "succeeded" or "failed", as Tekton's status attribute.
	statusKey = attribute.Key("status")
	// reasonKey is the Failed condition's reason, or "Succeeded".
	reasonKey = attribute.Key("reason")
	// phaseKey is a snapshot's status.phase.
	phaseKey = attribute.Key("phase")
)

const (
	statusSucceeded = "succeeded"
	statusFailed    = "failed"
)

// phases are the phases the phase gauge always reports, zero or not.
var phases = []v1alpha1.SandboxSnapshotPhase{v1alpha1.PhasePending, v1alpha1.PhaseCommitting, v1alpha1.PhaseSucceed, v1alpha1.PhaseFailed}

// metrics holds the controller's own instruments (docs/metrics.md).
type metrics struct {
	duration       metric.Float64Histogram
	pauseWindow    metric.Float64Histogram
	commitDuration metric.Float64Histogram
	taskRunLatency metric.Float64Histogram
	thawRetries    metric.Int64Counter
}

// newMetrics makes the instruments on meter, and the gauges that count, at
// each collection, the snapshots ours accepts and the commits in flight.
func newMetrics(meter metric.Meter, snapshots snapshotlisters.SandboxSnapshotLister,
	taskRuns pipelinelisters.TaskRunNamespaceLister, ours func(any) bool) (*metrics, error) {
	var m metrics
	var errs []error
	histogram := func(name, description string, buckets ...float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(description), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, description, unit string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithDescription(description), metric.WithUnit(unit))
		errs = append(errs, err)
		return g
	}
	m.duration = histogram("sandbox_snapshot_duration_seconds",
		"Time from a SandboxSnapshot's creation to its terminal phase, by status and reason",
		1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
	m.pauseWindow = histogram("sandbox_snapshot_pause_window_seconds",
		"Time a successful commit kept its sandbox paused, as the committer measured it",
		0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	m.commitDuration = histogram("sandbox_snapshot_commit_duration_seconds",
		"Time from a commit TaskRun's start to its completion (commit and push), by status",
		1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
	m.taskRunLatency = histogram("sandbox_snapshot_taskrun_creation_latency_seconds",
		"Time from a SandboxSnapshot's creation to the creation of its commit TaskRun",
		0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	var err error
	m.thawRetries, err = meter.Int64Counter("sandbox_snapshot_thaw_retries",
		metric.WithDescription("Thaws of a sandbox a failed commit may have left paused, started again after the unpause TaskRun failed, timed out waiting for its pod or was deleted"),
		metric.WithUnit("{retry}"))
	errs = append(errs, err)
	byPhase := gauge("sandbox_snapshot_snapshots", "SandboxSnapshots handled by this operator, by phase", "{snapshot}")
	waiting := gauge("sandbox_snapshot_waiting_for_commit",
		"Pending SandboxSnapshots waiting for another commit of the same sandbox to end", "{snapshot}")
	inFlight := gauge("sandbox_snapshot_commits_in_flight", "Commit TaskRuns that have not finished", "{taskrun}")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("making the controller's metrics: %w", err)
	}

	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		all, err := snapshots.List(labels.Everything())
		if err != nil {
			return err
		}
		counts := map[v1alpha1.SandboxSnapshotPhase]int64{}
		var waitingForCommit int64
		for _, s := range all {
			if !ours(s) {
				continue
			}
			phase := s.Status.Phase
			if phase == "" {
				phase = v1alpha1.PhasePending
			}
			counts[phase]++
			if ready := s.Status.GetCondition(v1alpha1.ConditionReady); phase == v1alpha1.PhasePending &&
				ready != nil && ready.Reason == v1alpha1.ReasonWaitingForCommit {
				waitingForCommit++
			}
		}
		for _, p := range phases {
			o.ObserveInt64(byPhase, counts[p], metric.WithAttributes(phaseKey.String(string(p))))
		}
		o.ObserveInt64(waiting, waitingForCommit)

		trs, err := taskRuns.List(labels.Everything())
		if err != nil {
			return err
		}
		var running int64
		for _, tr := range trs {
			if resources.IsCommit(tr) && !tr.IsDone() {
				running++
			}
		}
		o.ObserveInt64(inFlight, running)
		return nil
	}, byPhase, waiting, inFlight)
	if err != nil {
		return nil, fmt.Errorf("registering the controller's gauges: %w", err)
	}
	return &m, nil
}

// finished records a snapshot that just reached its terminal phase, and its
// commit TaskRun or nil.
func (m *metrics) finished(ctx context.Context, s *v1alpha1.SandboxSnapshot, commit *pipelinev1.TaskRun) {
	status, reason := statusSucceeded, v1alpha1.ReasonSucceeded
	if s.Status.Phase == v1alpha1.PhaseFailed {
		status, reason = statusFailed, s.Status.GetCondition(v1alpha1.ConditionFailed).Reason
	}
	if end := s.Status.CompletionTime; end != nil {
		m.duration.Record(ctx, seconds(end.Sub(s.CreationTimestamp.Time)),
			metric.WithAttributes(statusKey.String(status), reasonKey.String(reason)))
	}
	if pause := s.Status.PauseWindowMilliseconds; status == statusSucceeded && pause != nil {
		m.pauseWindow.Record(ctx, float64(*pause)/1000)
	}
	if commit != nil && commit.Status.StartTime != nil && commit.Status.CompletionTime != nil {
		status := statusSucceeded
		if !commit.IsSuccessful() {
			status = statusFailed
		}
		m.commitDuration.Record(ctx, seconds(commit.Status.CompletionTime.Sub(commit.Status.StartTime.Time)),
			metric.WithAttributes(statusKey.String(status)))
	}
}

func (m *metrics) thawRetried(ctx context.Context) {
	m.thawRetries.Add(ctx, 1)
}

// taskRunCreated records that s's commit TaskRun was created at now.
func (m *metrics) taskRunCreated(ctx context.Context, s *v1alpha1.SandboxSnapshot, now time.Time) {
	m.taskRunLatency.Record(ctx, seconds(now.Sub(s.CreationTimestamp.Time)))
}

// seconds is d in seconds, never below zero (clocks of two machines).
func seconds(d time.Duration) float64 {
	return max(d, 0).Seconds()
}
