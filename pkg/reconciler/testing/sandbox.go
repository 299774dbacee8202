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

package testing

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// BatchSandboxOption changes a BatchSandbox.
type BatchSandboxOption func(*v1alpha1.BatchSandbox)

// BatchSandbox returns a BatchSandbox at the given generation.
func BatchSandbox(namespace, name string, generation int64, opts ...BatchSandboxOption) *v1alpha1.BatchSandbox {
	sb := &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{
		Namespace:  namespace,
		Name:       name,
		UID:        types.UID(name + "-uid"),
		Generation: generation,
	}}
	for _, opt := range opts {
		opt(sb)
	}
	return sb
}

// WithAllocatedPods sets the alloc-status annotation OpenSandbox writes.
func WithAllocatedPods(pods ...string) BatchSandboxOption {
	return func(sb *v1alpha1.BatchSandbox) {
		raw, _ := json.Marshal(map[string][]string{"pods": pods})
		metav1.SetMetaDataAnnotation(&sb.ObjectMeta, sandbox.AllocStatusAnnotation, string(raw))
	}
}

// WithAllocStatus sets the alloc-status annotation verbatim.
func WithAllocStatus(raw string) BatchSandboxOption {
	return func(sb *v1alpha1.BatchSandbox) {
		metav1.SetMetaDataAnnotation(&sb.ObjectMeta, sandbox.AllocStatusAnnotation, raw)
	}
}

// WithTemplateContainers gives the BatchSandbox a pod template with these containers.
func WithTemplateContainers(names ...string) BatchSandboxOption {
	return func(sb *v1alpha1.BatchSandbox) {
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers(names)}}
	}
}

// PodOption changes a Pod.
type PodOption func(*corev1.Pod)

// Pod returns a pod with the given containers, not yet scheduled.
func Pod(namespace, name string, containerNames []string, opts ...PodOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(name + "-uid")},
		Spec:       corev1.PodSpec{Containers: containers(containerNames)},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

// WithRunningOn binds the pod to a node and marks it Running.
func WithRunningOn(node string) PodOption {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
	}
}

// WithSandboxLabel labels the pod as one of the BatchSandbox's pods.
func WithSandboxLabel(sandboxName string) PodOption {
	return func(p *corev1.Pod) {
		metav1.SetMetaDataLabel(&p.ObjectMeta, sandbox.BatchSandboxPodLabel, sandboxName)
	}
}

// PushSecret returns a Secret of the given type.
func PushSecret(namespace, name string, secretType corev1.SecretType) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       secretType,
	}
}

func containers(names []string) []corev1.Container {
	cs := make([]corev1.Container, len(names))
	for i, n := range names {
		cs[i] = corev1.Container{Name: n, Image: "busybox"}
	}
	return cs
}
