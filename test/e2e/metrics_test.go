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
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// The operator's own metrics (docs/metrics.md), as Prometheus names them.
const (
	durationMetric       = "sandbox_snapshot_duration_seconds"
	pauseWindowMetric    = "sandbox_snapshot_pause_window_seconds"
	commitDurationMetric = "sandbox_snapshot_commit_duration_seconds"
	taskRunLatencyMetric = "sandbox_snapshot_taskrun_creation_latency_seconds"
	phaseMetric          = "sandbox_snapshot_snapshots"
	waitingMetric        = "sandbox_snapshot_waiting_for_commit"
	inFlightMetric       = "sandbox_snapshot_commits_in_flight"
)

// TestMetrics: snapshots that succeed, with known pause windows, and fail,
// with known reasons, show in the controller's /metrics, scraped over
// loopback: each end counted once by outcome and reason, the pause windows
// in their buckets, one TaskRun creation per commit, and the gauges
// following the snapshots (a commit in flight, one snapshot waiting for
// it) back to where they were.
func TestMetrics(t *testing.T) {
	framework.EnsureOneController(t)
	waitEarlierSnapshotsGone(t)
	e := framework.Setup(t)
	port := metricsPort(t, "controller-1")
	e.CreateSandbox("sb", framework.SandboxOpts{})
	e.CreateSandbox("other", framework.SandboxOpts{})

	start := time.Now()
	before := scrape(t, port)

	// first commits sb; second, of the same sandbox, waits for it.
	e.CreateSnapshot("first", "sb")
	first := e.WaitSnapshot("first", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	e.CreateSnapshot("second", "sb")
	e.WaitSnapshot("second", "waiting for first", func(s *v1alpha1.SandboxSnapshot) bool {
		c := s.Status.GetCondition(v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonWaitingForCommit
	})
	waitScrape(t, port, func(m test.Metrics) []string {
		return gaugeMismatch(m, before, map[string]float64{
			inFlightMetric: 1, waitingMetric: 1,
			phaseMetric + "{phase=Pending}": 1, phaseMetric + "{phase=Committing}": 1,
		})
	})

	// Tekton's part: first pauses its sandbox 321 ms, second 1500 ms.
	tr := e.WaitTaskRun(names.CommitTaskRun(first), "to exist", nil)
	e.SetTaskRunStatus(tr.Name, framework.Running)
	e.SetTaskRunStatus(tr.Name, framework.Succeeded(321, framework.DigestsFor(tr)...))
	e.WaitSnapshot("first", "Succeed", framework.IsPhase(v1alpha1.PhaseSucceed))
	second := e.WaitSnapshot("second", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	tr = e.WaitTaskRun(names.CommitTaskRun(second), "to exist", nil)
	e.SetTaskRunStatus(tr.Name, framework.Running)
	e.SetTaskRunStatus(tr.Name, framework.Succeeded(1500, framework.DigestsFor(tr)...))
	e.WaitSnapshot("second", "Succeed", framework.IsPhase(v1alpha1.PhaseSucceed))

	// A commit that times out, and a snapshot of a sandbox that is not there.
	e.CreateSnapshot("slow", "other")
	slow := e.WaitSnapshot("slow", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	tr = e.WaitTaskRun(names.CommitTaskRun(slow), "to exist", nil)
	e.SetTaskRunStatus(tr.Name, framework.Running)
	e.SetTaskRunStatus(tr.Name, framework.Failed(pipelinev1.TaskRunReasonTimedOut, "TaskRun timed out"))
	e.WaitSnapshot("slow", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
	e.CreateSnapshot("ghost-snap", "ghost")
	e.WaitSnapshot("ghost-snap", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))

	ends := []struct {
		metric, labels string
		want           uint64
	}{
		{durationMetric, "reason=Succeeded,status=succeeded", 2},
		{durationMetric, "reason=" + v1alpha1.ReasonCommitTimedOut + ",status=failed", 1},
		{durationMetric, "reason=" + v1alpha1.ReasonBatchSandboxLookupFailed + ",status=failed", 1},
		{commitDurationMetric, "status=succeeded", 2},
		{commitDurationMetric, "status=failed", 1},
		{pauseWindowMetric, "", 2},
		{taskRunLatencyMetric, "", 3},
	}
	// A pass records a snapshot's end just after its status write, which
	// the test may see first.
	after := waitScrape(t, port, func(m test.Metrics) []string {
		mismatch := gaugeMismatch(m, before, map[string]float64{
			inFlightMetric: 0, waitingMetric: 0,
			phaseMetric + "{phase=Pending}": 0, phaseMetric + "{phase=Committing}": 0,
			phaseMetric + "{phase=Succeed}": 2, phaseMetric + "{phase=Failed}": 2,
		})
		for _, c := range ends {
			if count, _ := m.Histogram(t, c.metric, c.labels).Delta(before.Histogram(t, c.metric, c.labels)); count != c.want {
				mismatch = append(mismatch, fmt.Sprintf("%s{%s}: %d more observations, want %d", c.metric, c.labels, count, c.want))
			}
		}
		return mismatch
	})
	elapsed := time.Since(start).Seconds()
	for _, c := range ends {
		// The clock of each observation ran within this test; the second
		// resolution of Kubernetes timestamps adds up to one second.
		_, sum := after.Histogram(t, c.metric, c.labels).Delta(before.Histogram(t, c.metric, c.labels))
		if limit := float64(c.want) * (elapsed + 1); sum < 0 || sum > limit {
			t.Errorf("%s{%s}: the sum grew by %gs, want between 0 and %gs", c.metric, c.labels, sum, limit)
		}
	}

	// The pause windows: 0.321 s and 1.5 s, exactly, and in their buckets.
	pause, pauseBefore := after.Histogram(t, pauseWindowMetric, ""), before.Histogram(t, pauseWindowMetric, "")
	if _, sum := pause.Delta(pauseBefore); math.Abs(sum-1.821) > 1e-9 {
		t.Errorf("%s: the sum grew by %g, want 1.821 (321 ms + 1500 ms)", pauseWindowMetric, sum)
	}
	for le, want := range map[float64]uint64{0.25: 0, 0.5: 1, 1: 1, 2.5: 2} {
		if got := pause.Bucket(t, le) - pauseBefore.Bucket(t, le); got != want {
			t.Errorf("%s{le=%g}: %d more observations, want %d", pauseWindowMetric, le, got, want)
		}
	}
}

// waitEarlierSnapshotsGone waits until the snapshots that earlier tests
// left in their namespaces, deleted at their end, are gone: the gauges count
// every snapshot of the cluster. (The namespaces themselves may take longer.)
// A snapshot left Committing waits, being deleted, for its TaskRun to end,
// at most resources.UnpauseTimeout.
func waitEarlierSnapshotsGone(t *testing.T) {
	t.Helper()
	var left []string
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, resources.UnpauseTimeout+framework.Timeout, true, func(ctx context.Context) (bool, error) {
		namespaces, err := framework.Clients().Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: framework.E2ELabel})
		if err != nil {
			return false, err
		}
		left = left[:0]
		for _, ns := range namespaces.Items {
			snapshots, err := framework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, s := range snapshots.Items {
				left = append(left, fmt.Sprintf("%s/%s (%s, finalizers %v)", s.Namespace, s.Name, s.Status.Phase, s.Finalizers))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("snapshots of earlier tests are still there (E2E_KEEP_NAMESPACES?): %v: %v", left, err)
	}
	t.Logf("no snapshots of earlier tests after %v", time.Since(start).Round(time.Millisecond))
}

// metricsPort reads the Prometheus port test/cluster/run-controller.sh gave an instance.
func metricsPort(t *testing.T, instance string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "_output", "cluster", instance+".env"))
	if err != nil {
		t.Fatalf("reading the ports of %s: %v", instance, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if port, ok := strings.CutPrefix(line, "METRICS_PROMETHEUS_PORT="); ok {
			return port
		}
	}
	t.Fatalf("%s.env has no METRICS_PROMETHEUS_PORT:\n%s", instance, b)
	return ""
}

// scrape reads the controller's /metrics over loopback.
func scrape(t *testing.T, port string) test.Metrics {
	t.Helper()
	m, err := tryScrape(port)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tryScrape(port string) (test.Metrics, error) {
	url := "http://127.0.0.1:" + port + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	families, err := test.ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return families, nil
}

// waitScrape scrapes until mismatch finds nothing amiss, and returns that scrape.
func waitScrape(t *testing.T, port string, mismatch func(test.Metrics) []string) test.Metrics {
	t.Helper()
	var last test.Metrics
	var wrong []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, framework.Timeout, true, func(context.Context) (bool, error) {
		m, err := tryScrape(port)
		if err != nil {
			return false, err
		}
		last, wrong = m, mismatch(m)
		return len(wrong) == 0, nil
	})
	if err != nil {
		t.Fatalf("metrics: %v:\n%s", err, strings.Join(wrong, "\n"))
	}
	return last
}

// gaugeMismatch describes each gauge series whose value in m is not its
// value in before plus its delta.
func gaugeMismatch(m, before test.Metrics, deltas map[string]float64) []string {
	var out []string
	for series, delta := range deltas {
		was, err := before.Gauge(series)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		now, err := m.Gauge(series)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if now != was+delta {
			out = append(out, fmt.Sprintf("%s = %g, want %g%+g", series, now, was, delta))
		}
	}
	slices.Sort(out)
	return out
}
