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

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
)

var batchSandboxes = schema.GroupVersionResource{Group: sandbox.GroupName, Version: "v1alpha1", Resource: "batchsandboxes"}

// warmup names the sandbox and snapshot that run before the burst: the
// controller holds its lease and has warm connections once it succeeds.
const warmup = "warmup"

func sandboxName(i int) string {
	if i == 0 {
		return "sb-" + warmup
	}
	return fmt.Sprintf("sb-%04d", i)
}

func snapshotName(i int) string {
	if i == 0 {
		return "snap-" + warmup
	}
	return fmt.Sprintf("snap-%04d", i)
}

func containerNames(n int) []string {
	if n == 1 {
		return []string{"sandbox"}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	return names
}

// podIndexLabel numbers a BatchSandbox's pods, as OpenSandbox labels them.
const podIndexLabel = "batch-sandbox.sandbox.opensandbox.io/pod-index"

// setup makes the world the snapshots start from: the kwok node, the
// namespace, and the warm-up plus N BatchSandboxes, each with one pod on the
// node that kwok turns Running. Each is what OpenSandbox's BatchSandbox
// controller leaves a one-replica sandbox of a template in (its pod <name>-0,
// owned by it and labelled with its name and index), so that controller has
// nothing to create or delete; the pod is also named in the sandbox's
// alloc-status annotation, where both controllers look first.
func setup(ctx context.Context, c *clients, o *options) error {
	start := time.Now()
	if err := ensureNode(ctx, c, o.node); err != nil {
		return err
	}
	ns := o.namespace()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"app.kubernetes.io/part-of": "sso-bench"}}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s (left by an earlier run? bench cleanup -n %d): %w", ns, o.n, err)
	}
	// Pods are refused until the namespace has its default ServiceAccount.
	if err := poll(ctx, o.timeout, func() (bool, error) {
		_, err := c.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("waiting for ServiceAccount %s/default: %w", ns, err)
	}

	containers := make([]corev1.Container, o.containers)
	template := make([]any, o.containers)
	for i, name := range containerNames(o.containers) {
		containers[i] = corev1.Container{Name: name, Image: "127.0.0.1:5000/bench/sandbox:latest"}
		template[i] = map[string]any{"name": name, "image": containers[i].Image}
	}
	err := parallel(ctx, o.n+1, 32, func(i int) error {
		sb := sandboxName(i)
		pod := sb + "-0"
		alloc, _ := json.Marshal(map[string][]string{"pods": {pod}})
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": batchSandboxes.GroupVersion().String(),
			"kind":       "BatchSandbox",
			"metadata": map[string]any{
				"name":        sb,
				"namespace":   ns,
				"annotations": map[string]any{sandbox.AllocStatusAnnotation: string(alloc)},
			},
			"spec": map[string]any{
				"replicas": int64(1),
				"template": map[string]any{"spec": map[string]any{"containers": template}},
			},
		}}
		created, err := c.dynamic.Resource(batchSandboxes).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating BatchSandbox %s: %w", sb, err)
		}
		_, err = c.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:   pod,
				Labels: map[string]string{sandbox.BatchSandboxPodLabel: sb, podIndexLabel: "0"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: batchSandboxes.GroupVersion().String(), Kind: "BatchSandbox",
					Name: sb, UID: created.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			},
			Spec: corev1.PodSpec{
				NodeName:                      o.node,
				Containers:                    containers,
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To[int64](0),
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", pod, err)
		}
		return nil
	})
	if err != nil {
		return err
	}

	running := 0
	err = poll(ctx, o.timeout, func() (bool, error) {
		pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		running = 0
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == o.n+1, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d pods Running (is kwok managing node %s?): %w", running, o.n+1, o.node, err)
	}
	logf("setup: %d BatchSandboxes with a Running pod on %s in %s (%.1fs)", o.n+1, o.node, ns, time.Since(start).Seconds())
	return nil
}

// ensureNode creates the fake node kwok manages, if it is not there yet.
func ensureNode(ctx context.Context, c *clients, name string) error {
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("5000"),
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
	}
	_, err := c.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{corev1.LabelHostname: name, "type": "kwok"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}, metav1.CreateOptions{})
	if apierrs.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// cleanup deletes the namespace and waits until it is gone. The controller
// must still run: every snapshot carries its finalizer, and finalizing
// deletes the snapshot's TaskRun. Anything it leaves behind is reported and
// then removed, so that the next size starts clean.
func cleanup(ctx context.Context, c *clients, o *options) error {
	start := time.Now()
	ns := o.namespace()
	err := c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrs.IsNotFound(err) {
		return err
	}
	gone := poll(ctx, o.timeout, func() (bool, error) {
		_, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrs.IsNotFound(err), ignoreNotFound(err)
	})
	var problems []string
	if gone != nil {
		left, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		problems = append(problems, fmt.Sprintf("namespace %s still there after %s with %d snapshot(s); removing their finalizers", ns, o.timeout, len(left.Items)))
		for _, s := range left.Items {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			if _, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrs.IsNotFound(err) {
				return err
			}
		}
	}
	// The controller deletes each snapshot's TaskRun as it finalizes it,
	// and starts one that releases what a Succeed snapshot kept on its node,
	// which it deletes once Tekton (the harness, here) has run it; give it a
	// minute for any it has not got to yet.
	selector := sandbox.SnapshotNamespaceLabel + "=" + ns
	left := 0
	_ = poll(ctx, time.Minute, func() (bool, error) {
		trs, err := c.pipeline.TektonV1().TaskRuns(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range trs.Items {
			if tr := &trs.Items[i]; !tr.IsDone() && tr.DeletionTimestamp == nil {
				if err := complete(ctx, c, tr); ignoreNotFound(err) != nil {
					return false, err
				}
			}
		}
		left = len(trs.Items)
		return left == 0, nil
	})
	if left > 0 {
		problems = append(problems, fmt.Sprintf("%d TaskRun(s) of %s left in %s a minute after; deleting them", left, ns, systemNamespace))
		if err := c.pipeline.TektonV1().TaskRuns(systemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
			return err
		}
	}
	if err := poll(ctx, o.timeout, func() (bool, error) {
		_, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrs.IsNotFound(err), ignoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("namespace %s is not going away: %w", ns, err)
	}
	logf("cleanup: %s deleted in %.1fs", ns, time.Since(start).Seconds())
	if len(problems) > 0 {
		return fmt.Errorf("cleanup: %v", problems)
	}
	return nil
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// poll calls cond every 250 ms until it is done, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
}

func ignoreNotFound(err error) error {
	if apierrs.IsNotFound(err) {
		return nil
	}
	return err
}
