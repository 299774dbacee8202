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
	"fmt"
	"strings"
	"testing"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// burst is how many snapshots the crash tests keep in flight.
const burst = 12

// TestControllerRestart: the controller is killed (SIGKILL) while snapshots
// are being committed, and more are created while it is down. Once it is
// back, every snapshot ends, each with exactly one TaskRun.
func TestControllerRestart(t *testing.T) {
	e := framework.Setup(t)
	t.Cleanup(func() { framework.EnsureOneController(t) })
	e.CreateSandbox("sb", framework.SandboxOpts{})

	for i := 0; i < burst; i++ {
		e.CreateSnapshot(fmt.Sprintf("before-%02d", i), "sb")
	}
	waitTaskRunsCreated(e, 1)
	framework.Controller(t, "kill")
	for i := 0; i < burst/2; i++ {
		e.CreateSnapshot(fmt.Sprintf("while-down-%02d", i), "sb")
	}
	framework.Controller(t, "start")

	e.AutoSucceed()
	all := e.WaitAllTerminal(burst+burst/2, framework.TakeoverTimeout)
	checkOneTaskRunEach(t, e, all)
}

// TestLeaderElection: two replicas share a Lease; the leader is killed
// mid-flight and the other one finishes the work, with one TaskRun per snapshot.
func TestLeaderElection(t *testing.T) {
	e := framework.Setup(t)
	t.Cleanup(func() { framework.EnsureOneController(t) })
	framework.EnsureOneController(t)
	framework.Controller(t, "start", "2")

	leader := strings.TrimSpace(framework.Controller(t, "leader"))
	if leader != "1" && leader != "2" {
		t.Fatalf("test/cluster/run-controller.sh leader = %q, want exactly one of 1 and 2", leader)
	}
	follower := map[string]string{"1": "2", "2": "1"}[leader]
	t.Logf("controller-%s leads, controller-%s follows", leader, follower)

	e.CreateSandbox("sb", framework.SandboxOpts{})
	for i := 0; i < burst; i++ {
		e.CreateSnapshot(fmt.Sprintf("before-%02d", i), "sb")
	}
	waitTaskRunsCreated(e, 1)
	framework.Controller(t, "kill", leader)
	for i := 0; i < burst/2; i++ {
		e.CreateSnapshot(fmt.Sprintf("after-%02d", i), "sb")
	}

	e.AutoSucceed()
	all := e.WaitAllTerminal(burst+burst/2, framework.TakeoverTimeout)
	checkOneTaskRunEach(t, e, all)
	if got := strings.TrimSpace(framework.Controller(t, "leader")); got != follower {
		t.Errorf("after the leader was killed, test/cluster/run-controller.sh leader = %q, want %s", got, follower)
	}
}

// waitTaskRunsCreated waits until at least n TaskRuns exist for the namespace's snapshots.
func waitTaskRunsCreated(e *framework.Env, n int) {
	e.T.Helper()
	trs := e.C.Pipeline.TektonV1().TaskRuns(test.SystemNamespace)
	sel := metav1.ListOptions{LabelSelector: test.TaskRunSelector(e.NS, "")}
	var store cache.Store
	enough := func(s cache.Store) (bool, error) {
		store = s
		return len(s.List()) >= n, nil
	}
	test.Until(e.Ctx, e.T, framework.Timeout, fmt.Sprintf("%d TaskRun(s) for %s", n, e.NS), &pipelinev1.TaskRun{}, test.ListWatch(trs, sel),
		enough, func(watch.Event) (bool, error) { return enough(store) })
}

// checkOneTaskRunEach checks that every snapshot Succeeded through exactly one
// TaskRun, created once and never deleted.
func checkOneTaskRunEach(t *testing.T, e *framework.Env, all []*v1alpha1.SandboxSnapshot) {
	t.Helper()
	created := e.TaskRuns.Created()
	for _, s := range all {
		if s.Status.Phase != v1alpha1.PhaseSucceed {
			t.Errorf("%s ended %s: %s", s.Name, s.Status.Phase, framework.Dump(s.Status.Conditions))
		}
		want := names.CommitTaskRun(s)
		if framework.OwnStatusFields() && (s.Status.TaskRunRef == nil || s.Status.TaskRunRef.Name != want) {
			t.Errorf("%s: taskRunRef %v, want %s", s.Name, s.Status.TaskRunRef, want)
		}
		if trs := e.TaskRunsOf(s.Name); len(trs) != 1 {
			t.Errorf("%s has %d TaskRuns: %v", s.Name, len(trs), test.TaskRunNames(trs))
		}
		checkCreatedOnce(t, e, want)
	}
	if len(created) != len(all) {
		t.Errorf("%d TaskRuns were created for %d snapshots: %v", len(created), len(all), created)
	}
}
