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

// Package teardown releases the snapshots of an operator being uninstalled:
// it stops the controller, then removes the operator's finalizer, and no
// other, from every SandboxSnapshot, so that nothing waits on a controller
// that is gone and OpenSandbox's own controller can take them back.
package teardown

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
)

// Options says which controller to stop and how long to wait for it.
type Options struct {
	// Namespace and Deployment name the controller's Deployment.
	Namespace, Deployment string
	// Timeout bounds the wait for the controller's pods to go.
	Timeout time.Duration
	// Poll is how often the pods are listed while waiting.
	Poll time.Duration
	// SnapshotNamespace limits the release to one namespace; empty: all.
	SnapshotNamespace string
}

// Result is what Run did.
type Result struct {
	// Stopped reports whether the Deployment was found and scaled to zero.
	Stopped bool
	// Released lists, as namespace/name, the snapshots whose finalizer was
	// removed.
	Released []string
	// Unfinished lists those of Released that were neither Succeed nor
	// Failed: their commit TaskRuns, if they run on, thaw the sandbox as
	// they end, but no controller records the result.
	Unfinished []string
}

// Run scales the controller's Deployment to zero, waits until none of its
// pods runs (a pod that has ended does not count), then removes
// sandbox.SnapshotFinalizer from every SandboxSnapshot (of
// o.SnapshotNamespace, when set). A controller still running would add the
// finalizer back, so Run stops there if the pods outlive the timeout. A
// Deployment that is gone is taken as a controller already stopped.
func Run(ctx context.Context, kube kubernetes.Interface, snapshots versioned.Interface, o Options) (Result, error) {
	var res Result
	dep, err := kube.AppsV1().Deployments(o.Namespace).Get(ctx, o.Deployment, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
	case err != nil:
		return res, fmt.Errorf("reading Deployment %s/%s: %w", o.Namespace, o.Deployment, err)
	default:
		if err := stop(ctx, kube, dep, o); err != nil {
			return res, err
		}
		res.Stopped = true
	}
	list, err := snapshots.SandboxV1alpha1().SandboxSnapshots(o.SnapshotNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, fmt.Errorf("listing SandboxSnapshots: %w", err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if !slices.Contains(s.Finalizers, sandbox.SnapshotFinalizer) {
			continue
		}
		released, err := release(ctx, snapshots, s)
		if err != nil {
			return res, err
		}
		if released {
			res.Released = append(res.Released, s.Namespace+"/"+s.Name)
			if !s.Status.IsTerminal() {
				res.Unfinished = append(res.Unfinished, s.Namespace+"/"+s.Name)
			}
		}
	}
	sort.Strings(res.Released)
	sort.Strings(res.Unfinished)
	return res, nil
}

// stop scales dep to zero and waits until no pod it selects runs.
func stop(ctx context.Context, kube kubernetes.Interface, dep *appsv1.Deployment, o Options) error {
	patch := []byte(`{"spec":{"replicas":0}}`)
	if _, err := kube.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("scaling Deployment %s/%s to zero: %w", dep.Namespace, dep.Name, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return fmt.Errorf("Deployment %s/%s: spec.selector: %w", dep.Namespace, dep.Name, err)
	}
	// A failed list is retried until the timeout: the wait is bounded
	// anyway, and near its end the client fails for lack of time.
	var running []string
	var listErr error
	listed := false
	err = wait.PollUntilContextTimeout(ctx, o.Poll, o.Timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			listErr = err
			return false, nil
		}
		listed, running = true, nil
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				running = append(running, p.Name)
			}
		}
		return len(running) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err
	case !listed:
		return fmt.Errorf("the pods of Deployment %s/%s could not be listed within %s (%w); no finalizer was removed", dep.Namespace, dep.Name, o.Timeout, listErr)
	default:
		return fmt.Errorf("the controller's pods %s in %s still run after %s; no finalizer was removed", strings.Join(running, ", "), dep.Namespace, o.Timeout)
	}
}

// release removes the operator's finalizer from s, and no other. The patch
// carries the resource version it was computed from; on a conflict the
// snapshot is read again and the patch retried. It reports false when the
// snapshot went, or lost the finalizer, meanwhile.
func release(ctx context.Context, snapshots versioned.Interface, s *v1alpha1.SandboxSnapshot) (bool, error) {
	client := snapshots.SandboxV1alpha1().SandboxSnapshots(s.Namespace)
	released := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !slices.Contains(s.Finalizers, sandbox.SnapshotFinalizer) {
			return nil
		}
		kept := slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == sandbox.SnapshotFinalizer })
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": kept, "resourceVersion": s.ResourceVersion}})
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrs.IsConflict(err) {
			latest, getErr := client.Get(ctx, s.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			s = latest
		}
		released = err == nil
		return err
	})
	switch {
	case apierrs.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("removing finalizer %s from SandboxSnapshot %s/%s: %w", sandbox.SnapshotFinalizer, s.Namespace, s.Name, err)
	}
	return released, nil
}
