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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/kmeta"
)

// SandboxSnapshot asks for the running containers of a BatchSandbox to be
// committed to OCI images and pushed to the snapshot registry.
//
// Its wire format is OpenSandbox's: OpenSandbox's BatchSandbox controller and
// server create these objects and read their status unchanged.
//
// +genclient
// +genreconciler:krshapedlogic=false
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSnapshotSpec   `json:"spec"`
	Status SandboxSnapshotStatus `json:"status,omitempty"`
}

var _ kmeta.OwnerRefable = (*SandboxSnapshot)(nil)

// SandboxSnapshotSpec names the sandbox to snapshot.
type SandboxSnapshotSpec struct {
	// SandboxName is the name of a BatchSandbox in the snapshot's namespace.
	SandboxName string `json:"sandboxName"`
}

// SandboxSnapshotPhase is the coarse state of a snapshot.
type SandboxSnapshotPhase string

const (
	// PhasePending means the snapshot is accepted but no commit has started.
	PhasePending SandboxSnapshotPhase = "Pending"
	// PhaseCommitting means a commit TaskRun is working on the snapshot.
	PhaseCommitting SandboxSnapshotPhase = "Committing"
	// PhaseSucceed means every container was committed and pushed.
	// The spelling is OpenSandbox's.
	PhaseSucceed SandboxSnapshotPhase = "Succeed"
	// PhaseFailed means the snapshot failed; the Failed condition says why.
	PhaseFailed SandboxSnapshotPhase = "Failed"
)

// Condition types of a SandboxSnapshot. They are OpenSandbox's only two, with
// status True or False: OpenSandbox's own CRD allows no others.
const (
	// ConditionReady is True once the snapshot's images are in the registry.
	ConditionReady = "Ready"
	// ConditionFailed is True once the snapshot has failed for good.
	ConditionFailed = "Failed"
)

// SandboxSnapshotStatus is the observed state of a SandboxSnapshot.
type SandboxSnapshotStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Pending, Committing, Succeed or Failed.
	// +optional
	Phase SandboxSnapshotPhase `json:"phase,omitempty"`
	// SourcePodName is the sandbox pod whose containers are committed.
	// +optional
	SourcePodName string `json:"sourcePodName,omitempty"`
	// SourceNodeName is the node that pod runs on, where the commit runs.
	// +optional
	SourceNodeName string `json:"sourceNodeName,omitempty"`
	// Containers lists each committed container with its image.
	// +optional
	Containers []ContainerSnapshot `json:"containers,omitempty"`
	// Conditions are the Ready and Failed conditions.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// The fields below are this operator's own. They only report: the
	// controller never reads them back, because OpenSandbox's CRD prunes
	// them. What it must remember it finds on the TaskRuns, by their
	// deterministic names and labels.

	// TaskRunRef names the commit TaskRun.
	// +optional
	TaskRunRef *TaskRunReference `json:"taskRunRef,omitempty"`
	// StartTime is when the commit TaskRun was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the snapshot reached Succeed or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Thaw reports the unpause TaskRun started when the commit pod ended
	// while the sandbox may have been paused.
	// +optional
	Thaw *ThawStatus `json:"thaw,omitempty"`
	// PauseWindowMilliseconds is how long the containers were frozen.
	// +optional
	PauseWindowMilliseconds *int64 `json:"pauseWindowMilliseconds,omitempty"`
	// RemovedTaskRuns lists the TaskRuns deleted once their retention
	// (config-snapshot taskrun-retention-*) was over. The images they
	// pushed stay recorded in Containers.
	// +optional
	RemovedTaskRuns []RemovedTaskRun `json:"removedTaskRuns,omitempty"`
	// MissingImages lists the images of a Succeed snapshot that the registry
	// no longer holds, as <repository>@<imageDigest>.
	// +optional
	MissingImages []string `json:"missingImages,omitempty"`
}

// RemovedTaskRun names a TaskRun deleted after its retention.
type RemovedTaskRun struct {
	// Namespace is the TaskRun's namespace.
	Namespace string `json:"namespace"`
	// Name is the TaskRun's name.
	Name string `json:"name"`
	// RemovalTime is when the controller deleted it.
	RemovalTime metav1.Time `json:"removalTime"`
}

// ContainerSnapshot is the image committed from one container.
type ContainerSnapshot struct {
	// ContainerName is the container's name in the sandbox pod.
	ContainerName string `json:"containerName"`
	// ImageURI is the image the container is pushed to, <repository>:<tag>;
	// once the snapshot succeeds, pinned to the manifest pushed:
	// <repository>:<tag>@<digest>.
	ImageURI string `json:"imageUri"`
	// ImageDigest is the digest of the manifest pushed.
	// +optional
	ImageDigest string `json:"imageDigest,omitempty"`
}

// ThawState is how far the thaw of a sandbox has got.
type ThawState string

const (
	// ThawRunning means the unpause TaskRun has not finished.
	ThawRunning ThawState = "Running"
	// ThawSucceeded means the unpause TaskRun thawed the sandbox.
	ThawSucceeded ThawState = "Succeeded"
	// ThawFailed means the sandbox may still be paused; Message says why.
	ThawFailed ThawState = "Failed"
)

// ThawStatus reports the unpause TaskRun of a snapshot.
type ThawStatus struct {
	// TaskRunRef names the unpause TaskRun.
	TaskRunRef TaskRunReference `json:"taskRunRef"`
	// State is Running, Succeeded or Failed.
	State ThawState `json:"state"`
	// Message describes the state.
	// +optional
	Message string `json:"message,omitempty"`
}

// TaskRunReference names a TaskRun.
type TaskRunReference struct {
	// Namespace is the TaskRun's namespace.
	Namespace string `json:"namespace"`
	// Name is the TaskRun's name.
	Name string `json:"name"`
}

// SandboxSnapshotList is a list of SandboxSnapshots.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxSnapshot `json:"items"`
}

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*SandboxSnapshot) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("SandboxSnapshot")
}
