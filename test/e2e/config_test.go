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
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// TestMisconfiguration: a broken config-snapshot fails new snapshots, before
// any TaskRun, with a reason naming the problem; the controller keeps running
// and picks up the fix without a restart.
func TestMisconfiguration(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{})
	// One commit at a time runs per pod: complete each, so that the next
	// snapshot of sb does not wait for it.
	e.AutoSucceed()
	pids := framework.ControllerPIDs()

	for _, tc := range []struct {
		name    string
		patch   map[string]any
		reason  string
		message string
	}{{
		name:    "RegistryNotConfigured",
		patch:   map[string]any{config.RegistryKey: nil},
		reason:  v1alpha1.ReasonRegistryNotConfigured,
		message: `set key "registry"`,
	}, {
		name:    "MissingPushSecret",
		patch:   map[string]any{config.PushSecretKey: "no-such-secret"},
		reason:  v1alpha1.ReasonInvalidConfiguration,
		message: "no-such-secret",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			restore := patchSnapshotConfig(t, e, tc.patch)
			s := snapshotUntil(e, tc.name, func(s *v1alpha1.SandboxSnapshot) bool {
				c := s.Status.GetCondition(v1alpha1.ConditionFailed)
				return c != nil && c.Reason == tc.reason
			})
			c := framework.Condition(t, s, v1alpha1.ConditionFailed)
			if !strings.Contains(c.Message, tc.message) {
				t.Errorf("Failed message %q does not mention %q", c.Message, tc.message)
			}
			if trs := e.TaskRunsOf(s.Name); len(trs) != 0 {
				t.Errorf("%s has TaskRuns %v", s.Name, test.TaskRunNames(trs))
			}

			restore()
			fixed := snapshotUntil(e, tc.name+"-fixed", func(s *v1alpha1.SandboxSnapshot) bool {
				return s.Status.Phase == v1alpha1.PhaseCommitting || s.Status.Phase == v1alpha1.PhaseSucceed
			})
			// Not left Committing: deleting the namespace would then wait
			// for a TaskRun that no one ends, up to resources.UnpauseTimeout.
			e.WaitSnapshot(fixed.Name, "Succeed", framework.IsPhase(v1alpha1.PhaseSucceed))
		})
	}
	if after := framework.ControllerPIDs(); !maps.Equal(pids, after) {
		t.Errorf("controller pids changed from %v to %v: it must keep running on a bad configuration", pids, after)
	}
}

// snapshotUntil creates snapshots of sandbox sb, one after the other, until
// one ends up as ok says. The controller applies a config-snapshot change
// when its ConfigMap watch delivers it; a snapshot created before that sees
// the old settings and is skipped.
func snapshotUntil(e *framework.Env, prefix string, ok func(*v1alpha1.SandboxSnapshot) bool) *v1alpha1.SandboxSnapshot {
	e.T.Helper()
	deadline := time.Now().Add(framework.Timeout)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("%s-%d", strings.ToLower(prefix), i)
		e.CreateSnapshot(name, "sb")
		s := e.WaitSnapshot(name, "to start or fail", func(s *v1alpha1.SandboxSnapshot) bool {
			return s.Status.Phase == v1alpha1.PhaseCommitting || s.Status.IsTerminal()
		})
		if ok(s) {
			return s
		}
		e.T.Logf("%s: %s (config change not seen yet)", name, s.Status.Phase)
	}
	e.T.Fatalf("no snapshot reached the expected state within %v", framework.Timeout)
	return nil
}

// patchSnapshotConfig merges patch into config-snapshot and returns a func
// that restores the previous values (also run at cleanup and on interrupt).
func patchSnapshotConfig(t *testing.T, e *framework.Env, patch map[string]any) (restore func()) {
	t.Helper()
	_, undo := test.PatchSnapshotConfig(t, e.C, patch)
	restore = func() { undo() }
	framework.Cleanup(t, restore)
	return restore
}
