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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BatchSandbox is a read-only view of OpenSandbox's BatchSandbox, holding just
// the fields this operator reads. OpenSandbox owns the type and its CRD.
//
// +genclient
// +genclient:onlyVerbs=get,list,watch
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BatchSandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BatchSandboxSpec `json:"spec,omitempty"`
}

// BatchSandboxSpec holds the parts of a BatchSandbox spec this operator reads.
type BatchSandboxSpec struct {
	// Template is the pod template of the sandbox; its containers are the ones
	// committed. Without it, the pod's own containers are committed.
	// +optional
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`
}

// BatchSandboxList is a list of BatchSandboxes.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BatchSandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []BatchSandbox `json:"items"`
}
