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

package sandboxsnapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
)

// permanentError fails the snapshot for good, with the reason to report.
type permanentError struct {
	reason string
	err    error
}

func (e *permanentError) Error() string { return e.err.Error() }

func permanent(reason, format string, args ...any) error {
	return &permanentError{reason: reason, err: fmt.Errorf(format, args...)}
}

// allocStatus is the JSON OpenSandbox keeps in the alloc-status annotation.
type allocStatus struct {
	Pods []string `json:"pods"`
}

// resolveSource finds the snapshot's running pod and the images its
// containers go to. A *permanentError fails the snapshot; others are retried.
func (r *Reconciler) resolveSource(ctx context.Context, s *v1alpha1.SandboxSnapshot, cfg *config.Snapshot) (resources.Source, error) {
	if err := r.checkPushSecret(ctx, cfg); err != nil {
		return resources.Source{}, err
	}
	sb, err := r.batchSandbox(ctx, s.Namespace, s.Spec.SandboxName)
	if apierrs.IsNotFound(err) {
		return resources.Source{}, permanent(v1alpha1.ReasonBatchSandboxLookupFailed,
			"BatchSandbox %s/%s not found", s.Namespace, s.Spec.SandboxName)
	} else if err != nil {
		return resources.Source{}, fmt.Errorf("getting BatchSandbox %s/%s: %w", s.Namespace, s.Spec.SandboxName, err)
	}

	pod, err := r.runningPod(ctx, sb)
	if err != nil {
		return resources.Source{}, err
	}

	containers := containerNames(pod.Spec)
	if sb.Spec.Template != nil {
		containers = containerNames(sb.Spec.Template.Spec)
	}
	if len(containers) == 0 {
		return resources.Source{}, permanent(v1alpha1.ReasonNoContainers,
			"BatchSandbox %s/%s and pod %s have no containers to commit", sb.Namespace, sb.Name, pod.Name)
	}

	tag := snapshotimage.Tag(s, sb)
	src := resources.Source{Pod: pod, Containers: make([]v1alpha1.ContainerSnapshot, len(containers))}
	for i, c := range containers {
		uri, err := snapshotimage.URI(cfg.Registry, sb.Namespace, sb.Name, c, tag)
		if err != nil {
			return resources.Source{}, permanent(v1alpha1.ReasonInvalidImageReference, "BatchSandbox %s/%s: %v", sb.Namespace, sb.Name, err)
		}
		src.Containers[i] = v1alpha1.ContainerSnapshot{ContainerName: c, ImageURI: uri}
	}
	return src, nil
}

// checkPushSecret fails the snapshot on a bad push Secret rather than leave a pod stuck.
func (r *Reconciler) checkPushSecret(ctx context.Context, cfg *config.Snapshot) error {
	if cfg.PushSecret == "" {
		return nil
	}
	secret, err := r.kubeClient.CoreV1().Secrets(r.namespace).Get(ctx, cfg.PushSecret, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		return permanent(v1alpha1.ReasonInvalidConfiguration, "push Secret %s/%s named by ConfigMap %s (key %q) not found",
			r.namespace, cfg.PushSecret, config.SnapshotConfigName, config.PushSecretKey)
	case err != nil:
		return fmt.Errorf("getting push Secret %s/%s: %w", r.namespace, cfg.PushSecret, err)
	case secret.Type != corev1.SecretTypeDockerConfigJson:
		return permanent(v1alpha1.ReasonInvalidConfiguration, "push Secret %s/%s is of type %q, want %q",
			r.namespace, cfg.PushSecret, secret.Type, corev1.SecretTypeDockerConfigJson)
	}
	return nil
}

// batchSandbox reads a BatchSandbox from the cache, else from the API: one
// created just before its snapshot may not be cached yet.
func (r *Reconciler) batchSandbox(ctx context.Context, namespace, name string) (*v1alpha1.BatchSandbox, error) {
	if sb, err := r.sandboxLister.BatchSandboxes(namespace).Get(name); err == nil {
		return sb, nil
	}
	return r.sandboxClient.SandboxV1alpha1().BatchSandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
}

// podReader reads the pods of one namespace.
type podReader interface {
	get(ctx context.Context, name string) (*corev1.Pod, error)
	list(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error)
}

// livePods reads pods from the API.
type livePods struct{ pods typedcorev1.PodInterface }

func (l livePods) get(ctx context.Context, name string) (*corev1.Pod, error) {
	return l.pods.Get(ctx, name, metav1.GetOptions{})
}

func (l livePods) list(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	list, err := l.pods.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// cachedPods reads pods from the informer, and one it misses by name from the API.
type cachedPods struct {
	cache corev1listers.PodNamespaceLister
	live  livePods
}

func (c cachedPods) get(ctx context.Context, name string) (*corev1.Pod, error) {
	if pod, err := c.cache.Get(name); err == nil {
		return pod, nil
	}
	return c.live.get(ctx, name)
}

func (c cachedPods) list(_ context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	return c.cache.List(selector)
}

func (r *Reconciler) livePods(namespace string) livePods {
	return livePods{pods: r.kubeClient.CoreV1().Pods(namespace)}
}

func (r *Reconciler) cachedPods(namespace string) cachedPods {
	return cachedPods{cache: r.podLister.Pods(namespace), live: r.livePods(namespace)}
}

// runningPod resolves the sandbox's Running pod as OpenSandbox does: the pods
// in the alloc-status annotation, those labelled with the sandbox's name, then
// <sandbox>-0. A search of the cache that finds none is made again on the API.
func (r *Reconciler) runningPod(ctx context.Context, sb *v1alpha1.BatchSandbox) (*corev1.Pod, error) {
	pod, err := r.findRunningPod(ctx, sb, r.cachedPods(sb.Namespace))
	var pe *permanentError
	if errors.As(err, &pe) {
		return r.findRunningPod(ctx, sb, r.livePods(sb.Namespace))
	}
	return pod, err
}

// findRunningPod is runningPod reading pods from pods.
func (r *Reconciler) findRunningPod(ctx context.Context, sb *v1alpha1.BatchSandbox, pods podReader) (*corev1.Pod, error) {
	var tried []string

	// An empty or malformed annotation is passed over, as OpenSandbox does.
	var alloc allocStatus
	if raw := sb.Annotations[sandbox.AllocStatusAnnotation]; raw != "" && json.Unmarshal([]byte(raw), &alloc) == nil && len(alloc.Pods) > 0 {
		for _, name := range alloc.Pods {
			pod, err := pods.get(ctx, name)
			if err != nil && !apierrs.IsNotFound(err) {
				return nil, fmt.Errorf("getting pod %s/%s: %w", sb.Namespace, name, err)
			}
			if err == nil && isRunning(pod) {
				return pod, nil
			}
		}
		tried = append(tried, fmt.Sprintf("pods %v from annotation %s", alloc.Pods, sandbox.AllocStatusAnnotation))
	}

	selector := labels.SelectorFromSet(labels.Set{sandbox.BatchSandboxPodLabel: sb.Name})
	list, err := pods.list(ctx, selector)
	if err != nil {
		return nil, fmt.Errorf("listing pods %s in %s: %w", selector, sb.Namespace, err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	for _, pod := range list {
		if isRunning(pod) {
			return pod, nil
		}
	}
	tried = append(tried, "pods labelled "+selector.String())

	name := sb.Name + "-0"
	pod, err := pods.get(ctx, name)
	if err != nil && !apierrs.IsNotFound(err) {
		return nil, fmt.Errorf("getting pod %s/%s: %w", sb.Namespace, name, err)
	}
	if err == nil && isRunning(pod) {
		return pod, nil
	}
	tried = append(tried, "pod "+name)

	return nil, permanent(v1alpha1.ReasonSourcePodNotFound,
		"no Running pod found for BatchSandbox %s/%s (tried %v)", sb.Namespace, sb.Name, tried)
}

func isRunning(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil
}

func containerNames(spec corev1.PodSpec) []string {
	names := make([]string, len(spec.Containers))
	for i, c := range spec.Containers {
		names[i] = c.Name
	}
	return names
}
