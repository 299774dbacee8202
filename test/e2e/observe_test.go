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
	"regexp"
	"strings"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// TestObservation: what a user sees with kubectl and tkn (the built ones,
// through test/cluster/env.sh's PATH).
func TestObservation(t *testing.T) {
	e := framework.Setup(t)
	kubectl, tkn := framework.Tool(t, "kubectl"), framework.Tool(t, "tkn")
	e.CreateSandbox("sb", framework.SandboxOpts{})
	e.CreateSnapshot("observed", "sb")
	s := e.WaitSnapshot("observed", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	tr := names.CommitTaskRun(s)

	t.Run("KubectlGet", func(t *testing.T) {
		out, err := framework.Run(t, kubectl, "get", "sbxsnap", "-n", e.NS)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME PHASE SANDBOX AGE" {
			t.Errorf("columns = %v, want NAME PHASE SANDBOX AGE", got)
		}
		if !regexp.MustCompile(`(?m)^observed\s+Committing\s+sb\s+\S+$`).MatchString(out) {
			t.Errorf("no row 'observed Committing sb <age>' in:\n%s", out)
		}
		wide, err := framework.Run(t, kubectl, "get", "sandboxsnapshots.sandbox.opensandbox.io", "observed", "-n", e.NS, "-o", "wide")
		if err != nil {
			t.Fatal(err)
		}
		if framework.OwnStatusFields() && (!strings.Contains(wide, "TASKRUN") || !strings.Contains(wide, tr)) {
			t.Errorf("-o wide does not show the TaskRun %s:\n%s", tr, wide)
		}
	})

	// kubectl wait, started before the commit ends, returns once it has.
	ctx, cancel := context.WithTimeout(e.Ctx, framework.Timeout)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := framework.RunContext(ctx, t, kubectl, "wait", "--for=jsonpath={.status.phase}=Succeed", "sbxsnap/observed",
			"-n", e.NS, "--timeout=60s")
		waited <- err
	}()
	trObj := e.WaitTaskRun(tr, "to exist", nil)
	e.SetTaskRunStatus(tr, framework.Succeeded(5, framework.DigestsFor(trObj)...))
	if err := <-waited; err != nil {
		t.Errorf("kubectl wait --for=jsonpath='{.status.phase}'=Succeed: %v", err)
	}

	// Success sends no event: the Ready condition, which OpenSandbox's CRD
	// keeps too, names the TaskRun.
	t.Run("KubectlDescribe", func(t *testing.T) {
		out, err := framework.Run(t, kubectl, "describe", "sbxsnap", "observed", "-n", e.NS)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Ready", "Succeeded", "Succeed", "with TaskRun " + test.SystemNamespace + "/" + tr} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl describe does not show %q", want)
			}
		}
	})

	t.Run("TknTaskRunList", func(t *testing.T) {
		out, err := framework.Run(t, tkn, "taskrun", "list", "--label", sandbox.SnapshotNameLabel+"=observed", "-n", test.SystemNamespace)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tr) + `\s.*Succeeded`).MatchString(out) {
			t.Errorf("tkn taskrun list does not show %s Succeeded:\n%s", tr, out)
		}
	})

	t.Run("TknTaskRunDescribe", func(t *testing.T) {
		out, err := framework.Run(t, tkn, "taskrun", "describe", tr, "-n", test.SystemNamespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{tr, "sandbox-commit", sandbox.SnapshotNameLabel + "=observed",
			sandbox.SnapshotNamespaceLabel + "=" + e.NS, "Succeeded", "DIGESTS", "pod-name"} {
			if !strings.Contains(out, want) {
				t.Errorf("tkn taskrun describe does not show %q", want)
			}
		}
	})
}

// waitEvent waits for an event with reason on a snapshot.
func waitEvent(e *framework.Env, snapshot, reason string) {
	e.T.Helper()
	test.WaitForEvent(e.Ctx, e.T, e.C, e.NS, snapshot, reason, "", framework.Timeout)
}
