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

package test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// BatchSandboxes is OpenSandbox's BatchSandbox resource, for the dynamic
// client: the typed one knows only the fields the operator reads.
var BatchSandboxes = schema.GroupVersionResource{Group: sandbox.GroupName, Version: "v1alpha1", Resource: "batchsandboxes"}

// CreateSandbox creates a BatchSandbox as OpenSandbox does, naming its pod
// <name>-0 in the alloc-status annotation, and that pod, labelled with the
// sandbox's name, running spec. It returns the pod as created.
func CreateSandbox(ctx context.Context, t *testing.T, c *Clients, ns, name string, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	sb := MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: BatchSandbox
metadata:
  name: %[1]s
  namespace: %[2]s
  annotations:
    sandbox.opensandbox.io/alloc-status: '{"pods":["%[1]s-0"]}'
spec:
  replicas: 1
`, name, ns)
	if _, err := c.Dynamic.Resource(BatchSandboxes).Namespace(ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating BatchSandbox %s/%s: %v", ns, name, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: map[string]string{sandbox.BatchSandboxPodLabel: name}},
		Spec:       spec,
	}
	created, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
	}
	return created
}

// CreateSnapshot creates SandboxSnapshot name of the sandbox in ns.
func CreateSnapshot(ctx context.Context, t *testing.T, c *Clients, ns, name, sandboxName string) *v1alpha1.SandboxSnapshot {
	t.Helper()
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName},
	}
	created, err := c.Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating SandboxSnapshot %s/%s: %v", ns, name, err)
	}
	return created
}

// DeleteSnapshot deletes SandboxSnapshot name of ns and waits within d
// until it is gone.
func DeleteSnapshot(ctx context.Context, t *testing.T, c *Clients, ns, name string, d time.Duration) {
	t.Helper()
	if err := c.Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting SandboxSnapshot %s/%s: %v", ns, name, err)
	}
	WaitForSnapshotGone(ctx, t, c, ns, name, d)
}

// WaitForSnapshotGone waits within d until SandboxSnapshot name of ns no
// longer exists.
func WaitForSnapshotGone(ctx context.Context, t *testing.T, c *Clients, ns, name string, d time.Duration) {
	t.Helper()
	key := ns + "/" + name
	UntilGone(ctx, t, d, "SandboxSnapshot "+key+" to be deleted", &v1alpha1.SandboxSnapshot{},
		ListWatch(c.Sandbox.SandboxV1alpha1().SandboxSnapshots(ns), Named(name)), key)
}
