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

package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = metav1.NewTime(time.Date(2026, time.November, 29, 12, 0, 0, 0, time.UTC))

func TestLifecycle(t *testing.T) {
	var s SandboxSnapshotStatus
	s.InitializeConditions(now)
	if s.Phase != PhasePending || s.IsTerminal() {
		t.Fatalf("after InitializeConditions: phase %q, terminal %v", s.Phase, s.IsTerminal())
	}

	containers := []ContainerSnapshot{{ContainerName: "app", ImageURI: "r/ns/sb/app:t"}, {ContainerName: "side", ImageURI: "r/ns/sb/side:t"}}
	s.MarkCommitting(now, "sb-0", "node-1", containers, TaskRunReference{Namespace: "sys", Name: "tr"}, now)
	if s.Phase != PhaseCommitting || s.SourcePodName != "sb-0" || s.SourceNodeName != "node-1" || s.TaskRunRef.Name != "tr" || !s.StartTime.Equal(&now) {
		t.Fatalf("after MarkCommitting: %+v", s)
	}
	if c := s.GetCondition(ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonCommitting {
		t.Errorf("Ready after MarkCommitting = %+v", c)
	}
	// InitializeConditions never resets a started snapshot.
	s.InitializeConditions(now)
	if s.Phase != PhaseCommitting {
		t.Errorf("InitializeConditions reset phase to %q", s.Phase)
	}

	pause := int64(300)
	s.MarkSucceeded(now, []string{"sha256:a", "sha256:b"}, &pause, TaskRunReference{Namespace: "tekton", Name: "ns-snap-commit"})
	if s.Phase != PhaseSucceed || !s.IsTerminal() || s.Containers[0].ImageDigest != "sha256:a" || s.Containers[1].ImageDigest != "sha256:b" || *s.PauseWindowMilliseconds != 300 {
		t.Fatalf("after MarkSucceeded: %+v", s)
	}
	// Each imageUri is pinned to the manifest pushed, so that it resumes
	// those bytes wherever the tag points later.
	if s.Containers[0].ImageURI != "r/ns/sb/app:t@sha256:a" || s.Containers[1].ImageURI != "r/ns/sb/side:t@sha256:b" {
		t.Errorf("imageUris after MarkSucceeded = %q, %q, want each pinned to its digest", s.Containers[0].ImageURI, s.Containers[1].ImageURI)
	}
	// The TaskRun is named where OpenSandbox's CRD keeps it.
	if c := s.GetCondition(ConditionReady); c.Status != metav1.ConditionTrue ||
		c.Message != "Committed and pushed 2 container image(s) from pod sb-0 with TaskRun tekton/ns-snap-commit" {
		t.Errorf("Ready after MarkSucceeded = %+v", c)
	}
	if c := s.GetCondition(ConditionFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Failed after MarkSucceeded = %+v", c)
	}
}

func TestMarkFailed(t *testing.T) {
	var s SandboxSnapshotStatus
	s.InitializeConditions(now)
	s.MarkFailed(now, ReasonBatchSandboxLookupFailed, "BatchSandbox %s/%s not found", "ns", "sb")
	if s.Phase != PhaseFailed || !s.IsTerminal() || s.CompletionTime == nil {
		t.Fatalf("after MarkFailed: %+v", s)
	}
	for _, ct := range []string{ConditionReady, ConditionFailed} {
		c := s.GetCondition(ct)
		if c == nil || c.Reason != ReasonBatchSandboxLookupFailed || c.Message != "BatchSandbox ns/sb not found" {
			t.Errorf("%s condition = %+v", ct, c)
		}
	}
	if c := s.GetCondition(ConditionFailed); c.Status != metav1.ConditionTrue {
		t.Errorf("Failed condition status = %q, want True", c.Status)
	}
}

func TestConditionMessageIsBounded(t *testing.T) {
	var s SandboxSnapshotStatus
	s.MarkFailed(now, ReasonCommitJobFailed, "%s", strings.Repeat("x", 40000))
	if got := len(s.GetCondition(ConditionFailed).Message); got != maxConditionMessage {
		t.Errorf("message length = %d, want %d", got, maxConditionMessage)
	}
}

// TestConditionsFitOpenSandboxSchema drives a status through every Mark
// helper and checks each step against what OpenSandbox's own CRD accepts:
// condition types Ready and Failed only, with status True or False.
func TestConditionsFitOpenSandboxSchema(t *testing.T) {
	ref := TaskRunReference{Namespace: "sys", Name: "tr"}
	var s SandboxSnapshotStatus
	steps := []struct {
		name string
		mark func()
	}{
		{"InitializeConditions", func() { s.InitializeConditions(now) }},
		{"MarkWaiting", func() { s.MarkWaiting(now, "waiting for %s", "other") }},
		{"MarkWaitingForOpenSandboxJob", func() { s.MarkWaitingForOpenSandboxJob(now, "waiting for Job %s", "ns/snap-commit") }},
		{"MarkCommitting", func() { s.MarkCommitting(now, "sb-0", "node-1", nil, ref, now) }},
		{"MarkCommitPodPending", func() { s.MarkCommitPodPending(now, "unschedulable") }},
		{"MarkCommitRunning", func() { s.MarkCommitRunning(now, ref) }},
		{"MarkFailed", func() { s.MarkFailed(now, ReasonCommitJobFailed, "boom") }},
		{"MarkThawing", func() { s.MarkThawing(ref, "sb-0", 1) }},
		{"MarkThawFailed", func() { s.MarkThawFailed(ref, "still paused") }},
		{"MarkThawed", func() { s.MarkThawed(ref) }},
		{"MarkSucceeded", func() { s.MarkSucceeded(now, nil, nil, TaskRunReference{}) }},
	}
	for _, step := range steps {
		step.mark()
		for _, c := range s.Conditions {
			if c.Type != ConditionReady && c.Type != ConditionFailed {
				t.Errorf("after %s: condition type %q, OpenSandbox's CRD allows only Ready and Failed", step.name, c.Type)
			}
			if c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse {
				t.Errorf("after %s: condition %s has status %q, OpenSandbox's CRD allows only True and False", step.name, c.Type, c.Status)
			}
		}
	}
}

func TestWaitingAndPodPending(t *testing.T) {
	var s SandboxSnapshotStatus
	s.InitializeConditions(now)
	s.MarkWaiting(now, "waiting for SandboxSnapshot %s", "ns/first")
	if c := s.GetCondition(ConditionReady); s.Phase != PhasePending || c.Reason != ReasonWaitingForCommit || c.Message != "waiting for SandboxSnapshot ns/first" {
		t.Errorf("after MarkWaiting: phase %q, Ready %+v", s.Phase, c)
	}
	s.MarkCommitting(now, "sb-0", "node-1", nil, TaskRunReference{Namespace: "sys", Name: "tr"}, now)
	s.MarkCommitPodPending(now, "0/1 nodes are available")
	if c := s.GetCondition(ConditionReady); s.Phase != PhaseCommitting || c.Reason != ReasonCommitPodPending || c.Message != "0/1 nodes are available" {
		t.Errorf("after MarkCommitPodPending: phase %q, Ready %+v", s.Phase, c)
	}
	s.MarkCommitRunning(now, TaskRunReference{Namespace: "sys", Name: "tr"})
	if c := s.GetCondition(ConditionReady); c.Reason != ReasonCommitting || c.Message != "TaskRun sys/tr is committing pod sb-0 on node node-1" {
		t.Errorf("after MarkCommitRunning: Ready %+v", c)
	}
}

func TestWaitingForOpenSandboxJobKeepsThePhase(t *testing.T) {
	for _, phase := range []SandboxSnapshotPhase{PhasePending, PhaseCommitting} {
		s := SandboxSnapshotStatus{Phase: phase}
		s.MarkWaitingForOpenSandboxJob(now, "Waiting for Job %s", "ns/snap-commit")
		if c := s.GetCondition(ConditionReady); s.Phase != phase || c.Status != metav1.ConditionFalse ||
			c.Reason != ReasonWaitingForOpenSandboxJob || c.Message != "Waiting for Job ns/snap-commit" {
			t.Errorf("after MarkWaitingForOpenSandboxJob in %s: phase %q, Ready %+v", phase, s.Phase, c)
		}
	}
}
