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
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// TestRetentionAndImageDeletion: with a short retention, a real commit
// TaskRun and its pod are deleted once complete while the snapshot keeps its
// digests; with the Delete policy, deleting the snapshot deletes its
// manifests from the node's registry.
func TestRetentionAndImageDeletion(t *testing.T) {
	nodeframework.SetConfig(t, map[string]any{"taskrun-retention-succeeded": "10s", "image-deletion-policy": "Delete"},
		`"taskRunRetentionSucceeded":"10s","taskRunRetentionFailed":"24h0m0s","imageDeletionPolicy":"Delete"`)
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)

	trs := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace)
	tr, err := trs.Get(t.Context(), names.CommitTaskRun(s), metav1.GetOptions{})
	if apierrs.IsNotFound(err) {
		t.Fatalf("TaskRun %s was gone as the snapshot reached Succeed; a 10s retention is too short for this check", names.CommitTaskRun(s))
	}
	if err != nil {
		t.Fatal(err)
	}
	podName := tr.Status.PodName
	if podName == "" {
		t.Fatalf("TaskRun %s names no pod", tr.Name)
	}
	start := time.Now()
	nodeframework.Eventually(t, "TaskRun "+tr.Name+" and pod "+podName+" to be deleted", time.Minute, func() (bool, error) {
		_, trErr := trs.Get(t.Context(), tr.Name, metav1.GetOptions{})
		_, podErr := nodeframework.Clients().Kube.CoreV1().Pods(test.SystemNamespace).Get(t.Context(), podName, metav1.GetOptions{})
		return apierrs.IsNotFound(trErr) && apierrs.IsNotFound(podErr), nil
	})
	t.Logf("TaskRun %s and pod %s deleted %v after Succeed", tr.Name, podName, time.Since(start).Round(100*time.Millisecond))

	kept, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Status.Phase != v1alpha1.PhaseSucceed || !slices.Equal(kept.Status.Containers, s.Status.Containers) {
		t.Errorf("after the retention: phase %s, containers %+v; want Succeed and %+v", kept.Status.Phase, kept.Status.Containers, s.Status.Containers)
	}
	if trs := nodeframework.TaskRunsOf(t, ns, "sb-snap"); len(trs) != 0 {
		t.Errorf("TaskRuns %v exist again after the retention", test.TaskRunNames(trs))
	}

	refs := test.PinnedDigests(t, s)
	for _, ref := range refs {
		if !test.ManifestHeld(t.Context(), t, ref) {
			t.Fatalf("the registry does not hold %s before the snapshot is deleted", ref)
		}
	}
	test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", time.Minute)
	// Nothing runs from them: they go right after.
	nodeframework.Eventually(t, "the snapshot's manifests to be deleted", time.Minute, func() (bool, error) {
		return !slices.ContainsFunc(refs, func(ref name.Digest) bool { return test.ManifestHeld(t.Context(), t, ref) }), nil
	})
}
