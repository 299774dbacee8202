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
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/pod"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// A snapshot's stages, as a user's watches receive them: each is the first
// event that shows it, stamped on receipt, from the snapshot's creation.
var latencyStages = []string{
	"TaskRun created",
	"pod created",
	"pod scheduled",
	"init containers done",
	"step commit running",
	"step commit done",
	"step push done",
	"TaskRun Succeeded",
	"snapshot Succeed",
}

// TestSnapshotLatency measures what a user of OpenSandbox waits for, a
// snapshot's creation -> Succeed on a warm node, stage by stage, for
// E2E_LATENCY_SNAPSHOTS (6) snapshots in a row of one sandbox that writes
// 1 MiB before each, in each mode of E2E_LATENCY_MODES (Filesystem,Memory);
// and, in the same run, the cluster's floor: a TaskRun of one no-op step
// pinned to the same node, created -> Succeeded, one after each snapshot so
// that both see the node alike. It writes the medians of all but the first
// snapshot of each mode (which warms the node) to E2E_LATENCY_REPORT, and
// runs only with it set (test/bench/latency/run.sh): a benchmark, not a test of
// make check. Each snapshot must Succeed.
func TestSnapshotLatency(t *testing.T) {
	report := os.Getenv("E2E_LATENCY_REPORT")
	if report == "" {
		t.Skip("a benchmark: test/bench/latency/run.sh runs it with E2E_LATENCY_REPORT")
	}
	n := envInt(t, "E2E_LATENCY_SNAPSHOTS", 6)
	modes := strings.Split(envString("E2E_LATENCY_MODES", task.SnapshotModeFilesystem+","+task.SnapshotModeMemory), ",")
	flags := setTektonFlags(t, os.Getenv("E2E_LATENCY_TEKTON_FLAGS"))
	ns := nodeframework.NewNamespace(t)

	var out strings.Builder
	fmt.Fprintf(&out, "bench-latency: %d snapshots a mode, 1 MiB written before each; medians of snapshots 2-%d (%s, %d cores)\n",
		n, n, time.Now().UTC().Format("2006-01-02T15:04Z"), runtime.NumCPU())
	if len(flags) > 0 {
		fmt.Fprintf(&out, "Tekton's feature-flags: %s\n", strings.Join(flags, ", "))
	}
	fmt.Fprintln(&out)
	var node string
	var floors []time.Duration
	totals := map[string]time.Duration{}
	for _, mode := range modes {
		var podName string
		switch mode {
		case task.SnapshotModeFilesystem:
			node, podName = nodeframework.CreateSandbox(t, ns, "fs").Spec.NodeName, "fs-0"
		case task.SnapshotModeMemory:
			runSandbox(t, ns, "mem", hibernatingPod, memoryBase(t))
			podName = "mem-0"
		default:
			t.Fatalf("E2E_LATENCY_MODES: %q is neither %s nor %s", mode, task.SnapshotModeFilesystem, task.SnapshotModeMemory)
		}
		if node == "" {
			node = nodeOf(t, ns)
		}
		runs := make([][]time.Duration, 0, n)
		for i := range n {
			writeRandom(t, ns, podName, fmt.Sprintf("/tmp/latency-%d", i), 1<<20)
			stamps := snapshotStamps(t, ns, fmt.Sprintf("%s-%d", strings.ToLower(mode), i), strings.TrimSuffix(podName, "-0"), mode)
			t.Logf("%s snapshot %d: %v", mode, i+1, stamps)
			runs = append(runs, stamps)
			if i > 0 {
				floor := noopTaskRun(t, ns, node)
				t.Logf("floor after it: %v", floor)
				floors = append(floors, floor)
			}
		}
		fmt.Fprintf(&out, "| %s | ms from creation | ms from the stage before |\n|---|---:|---:|\n", mode)
		var before time.Duration
		for s, stage := range latencyStages {
			m := median(column(runs[1:], s))
			fmt.Fprintf(&out, "| %s | %d | %d |\n", stage, m.Milliseconds(), (m - before).Milliseconds())
			before = m
		}
		totals[mode] = before
		fmt.Fprintln(&out)
	}
	floor := median(floors)
	fmt.Fprintf(&out, "floor: a TaskRun of one no-op step on the same node, created -> Succeeded: %d ms (median of %d, one after each snapshot counted)\n",
		floor.Milliseconds(), len(floors))
	for _, mode := range modes {
		fmt.Fprintf(&out, "%s: create -> Succeed %d ms, %.2f x the floor, floor + %d ms\n",
			mode, totals[mode].Milliseconds(), float64(totals[mode])/float64(floor), (totals[mode] - floor).Milliseconds())
	}
	if err := os.WriteFile(report, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
}

// tektonFlags is the ConfigMap of Tekton's feature flags, in Tekton's
// namespace.
const tektonFlags = "feature-flags"

// setTektonFlags sets, for the test, the "key=value,..." of list in
// Tekton's feature-flags, which its controller applies to TaskRuns created
// from then on, and returns them as "key: value".
func setTektonFlags(t *testing.T, list string) []string {
	t.Helper()
	if list == "" {
		return nil
	}
	cms := nodeframework.Clients().Kube.CoreV1().ConfigMaps("tekton-pipelines")
	cm, err := cms.Get(t.Context(), tektonFlags, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	undo := cm.DeepCopy()
	var set []string
	for _, kv := range strings.Split(list, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("E2E_LATENCY_TEKTON_FLAGS: %q is not key=value", kv)
		}
		cm.Data[k] = v
		set = append(set, k+": "+v)
	}
	if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := cms.Get(context.Background(), tektonFlags, metav1.GetOptions{})
		if err == nil {
			cur.Data = undo.Data
			_, err = cms.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("restoring Tekton's %s: %v", tektonFlags, err)
		}
	})
	// Tekton's controller reads the ConfigMap through an informer; the
	// first snapshot of each mode, not counted, would absorb a late one.
	time.Sleep(5 * time.Second)
	return set
}

// snapshotStamps creates snapshot name of sandbox sb in ns, in mode, waits
// until it is Succeed and returns when each of latencyStages was received,
// from just before its creation.
func snapshotStamps(t *testing.T, ns, name, sb, mode string) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), nodeframework.SnapshotTimeout)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: test.TaskRunSelector(ns, name)}
	trs, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	defer trs.Stop()
	// Tekton gives the TaskRun's pod the TaskRun's labels.
	pods, err := nodeframework.Clients().Kube.CoreV1().Pods(test.SystemNamespace).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Stop()
	snaps, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Watch(ctx, test.Named(name))
	if err != nil {
		t.Fatal(err)
	}
	defer snaps.Stop()

	var mu sync.Mutex
	var start time.Time
	seen := map[string]time.Duration{}
	mark := func(stage string, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if _, done := seen[stage]; ok && !done {
			seen[stage] = time.Since(start)
		}
	}
	follow := func(w watch.Interface, stamp func(obj any)) {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				stamp(ev.Object)
			}
		}
	}
	go follow(trs, func(obj any) {
		if tr, ok := obj.(*pipelinev1.TaskRun); ok && strings.HasSuffix(tr.Name, "-commit") {
			mark("TaskRun created", true)
			mark("TaskRun Succeeded", tr.Status.GetCondition(apis.ConditionSucceeded).IsTrue())
		}
	})
	go follow(pods, func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mark("pod created", true)
		for _, cond := range p.Status.Conditions {
			mark("pod scheduled", cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue)
			mark("init containers done", cond.Type == corev1.PodInitialized && cond.Status == corev1.ConditionTrue)
		}
		for _, cs := range p.Status.ContainerStatuses {
			switch cs.Name {
			case "step-" + task.StepCommit:
				mark("step commit running", cs.State.Running != nil || cs.State.Terminated != nil)
				mark("step commit done", cs.State.Terminated != nil)
			case "step-" + task.StepPush:
				mark("step push done", cs.State.Terminated != nil)
			}
		}
	})
	succeed := make(chan string, 1)
	go follow(snaps, func(obj any) {
		if s, ok := obj.(*v1alpha1.SandboxSnapshot); ok && s.Status.IsTerminal() {
			mark("snapshot Succeed", s.Status.Phase == v1alpha1.PhaseSucceed)
			select {
			case succeed <- string(s.Status.Phase):
			default:
			}
		}
	})

	mu.Lock()
	start = time.Now()
	mu.Unlock()
	if mode == task.SnapshotModeMemory {
		createMemorySnapshot(t, ns, sb, name)
	} else {
		nodeframework.CreateSnapshot(t, ns, name, sb)
	}
	select {
	case phase := <-succeed:
		if phase != string(v1alpha1.PhaseSucceed) {
			t.Fatalf("snapshot %s/%s ended %s", ns, name, phase)
		}
	case <-ctx.Done():
		t.Fatalf("snapshot %s/%s not terminal within %v", ns, name, nodeframework.SnapshotTimeout)
	}
	// The pod's and the TaskRun's last events may trail the snapshot's.
	nodeframework.Eventually(t, "every stage of "+name, 30*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == len(latencyStages), nil
	})
	mu.Lock()
	defer mu.Unlock()
	stamps := make([]time.Duration, len(latencyStages))
	for i, stage := range latencyStages {
		stamps[i] = seen[stage]
	}
	return stamps
}

// noopTaskRun runs a TaskRun of one step that does nothing, pinned to node
// as the commit TaskRuns are, and returns its created -> Succeeded, as its
// watch receives them.
func noopTaskRun(t *testing.T, ns, node string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), nodeframework.SnapshotTimeout)
	defer cancel()
	tr := &pipelinev1.TaskRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "floor-"},
		Spec: pipelinev1.TaskRunSpec{
			TaskSpec: &pipelinev1.TaskSpec{Steps: []pipelinev1.Step{{
				Name: "noop", Image: nodeframework.LocalRegistry() + "/busybox:latest", Command: []string{"true"},
			}}},
			PodTemplate: &pod.Template{
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
					}}},
				}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		},
	}
	start := time.Now()
	tr, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(ns).Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(ns).Watch(ctx, test.Named(tr.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		got, ok := ev.Object.(*pipelinev1.TaskRun)
		if !ok {
			continue
		}
		if cond := got.Status.GetCondition(apis.ConditionSucceeded); cond != nil && cond.IsTrue() {
			return time.Since(start)
		} else if cond != nil && cond.IsFalse() {
			t.Fatalf("floor TaskRun %s/%s failed: %s", ns, tr.Name, cond.Message)
		}
	}
	t.Fatalf("floor TaskRun %s/%s did not succeed within %v", ns, tr.Name, nodeframework.SnapshotTimeout)
	return 0
}

// column returns stage i of each run.
func column(runs [][]time.Duration, i int) []time.Duration {
	col := make([]time.Duration, len(runs))
	for r, run := range runs {
		col[r] = run[i]
	}
	return col
}

// median returns the median of ds, which it sorts; 0 for none.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	switch {
	case len(ds) == 0:
		return 0
	case len(ds)%2 == 1:
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

// nodeOf returns the node of the first pod in ns.
func nodeOf(t *testing.T, ns string) string {
	t.Helper()
	pods, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no pod in %s to find the node of (%v)", ns, err)
	}
	return pods.Items[0].Spec.NodeName
}

// envString returns the environment variable key, or def when it is unset.
func envString(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}
