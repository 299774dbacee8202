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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// What OpenSandbox's SandboxSnapshot reconciler
// (internal/controller/sandboxsnapshot_lifecycle.go) makes and reads.
const (
	// openSandboxSnapshotLabel names a commit Job's snapshot.
	openSandboxSnapshotLabel = "sandbox.opensandbox.io/sandbox-snapshot-name"
	// commitJobSuffix ends a commit Job's name, <snapshot>-commit.
	commitJobSuffix = "-commit"
	// commitContainer is the commit Job's one container, whose termination
	// message OpenSandbox reads the digests from.
	commitContainer = "commit"
	// jobNameLabel is the label the Job controller puts on a Job's pods.
	jobNameLabel = batchv1.JobNameLabel
)

// kubeletPart plays the kubelet of kwok's node for OpenSandbox's commit
// Jobs, whose pods the Job controller makes and kwok turns Running: each
// Running commit pod is turned Succeeded once, its commit container
// terminated with exit code 0 and, as the termination message, the result
// image-committer writes to /dev/termination-log. The Job controller then
// marks the Job succeeded, and OpenSandbox reads the digests from the pod.
func kubeletPart(ctx context.Context, c *clients, ns string, tl *timeline, work chan<- func() error) []cache.SharedIndexInformer {
	jobs := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(ns)).Batch().V1().Jobs().Informer()
	_, _ = jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		job := obj.(*batchv1.Job)
		if name := job.Labels[openSandboxSnapshotLabel]; name != "" && job.Name == name+commitJobSuffix {
			tl.first(tl.taskRun, name, time.Now())
		}
	}})

	pods := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = jobNameLabel }),
	).Core().V1().Pods().Informer()
	var done sync.Map
	onPod := func(obj any) {
		pod := obj.(*corev1.Pod)
		if pod.Status.Phase != corev1.PodRunning || !strings.HasSuffix(pod.Labels[jobNameLabel], commitJobSuffix) {
			return
		}
		if _, seen := done.LoadOrStore(pod.UID, true); !seen {
			work <- func() error { return succeedPod(ctx, c, pod) }
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) }})
	return []cache.SharedIndexInformer{jobs, pods}
}

// succeedPod turns a Running commit pod Succeeded as the kubelet reports a
// container that exited 0 after writing its termination message.
func succeedPod(ctx context.Context, c *clients, pod *corev1.Pod) error {
	var args []string
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == commitContainer {
			args = ctr.Args
		}
	}
	msg, err := commitResult(args)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for attempt := 0; ; attempt++ {
		pod = pod.DeepCopy()
		now := metav1.Now()
		pod.Status.Phase = corev1.PodSucceeded
		for i, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady {
				pod.Status.Conditions[i].Status, pod.Status.Conditions[i].Reason = corev1.ConditionFalse, "PodCompleted"
				pod.Status.Conditions[i].LastTransitionTime = now
			}
		}
		for i, cs := range pod.Status.ContainerStatuses {
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			pod.Status.ContainerStatuses[i].Ready, pod.Status.ContainerStatuses[i].Started = false, ptr.To(false)
			pod.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID,
			}}
			if cs.Name == commitContainer {
				pod.Status.ContainerStatuses[i].State.Terminated.Message = msg
			}
		}
		_, err := c.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if !apierrs.IsConflict(err) || attempt == 5 {
			return err
		}
		if pod, err = c.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
}

// commitResult is what image-committer, given a commit Job's arguments
// (<pod> <namespace> <container>:<image>...), writes as its termination
// message: per container its name, image and a digest (here the sha256 of
// the image reference).
func commitResult(args []string) (string, error) {
	if len(args) < 3 {
		return "", fmt.Errorf("commit arguments %q: want <pod> <namespace> <container>:<image>...", args)
	}
	type container struct {
		Name   string `json:"name"`
		Image  string `json:"image"`
		Digest string `json:"digest"`
	}
	var result struct {
		Containers []container `json:"containers"`
	}
	for _, spec := range args[2:] {
		name, image, ok := strings.Cut(spec, ":")
		if !ok || name == "" || image == "" {
			return "", fmt.Errorf("commit argument %q: want <container>:<image>", spec)
		}
		sum := sha256.Sum256([]byte(image))
		result.Containers = append(result.Containers, container{Name: name, Image: image, Digest: "sha256:" + hex.EncodeToString(sum[:])})
	}
	b, err := json.Marshal(result)
	return string(b) + "\n", err
}

// jobEventWrites counts the writes of the events the Job controller
// recorded on the burst's commit Jobs and pods (the warm-up's left out): one
// per occurrence, the first a create and each repeat a patch.
func jobEventWrites(ctx context.Context, c *clients, ns string) (float64, error) {
	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0.0
	for _, e := range events.Items {
		kind, name := e.InvolvedObject.Kind, e.InvolvedObject.Name
		if (kind == "Job" || kind == "Pod") && strings.HasPrefix(name, "snap-") && !strings.HasPrefix(name, snapshotName(0)) {
			n += float64(max(e.Count, 1))
		}
	}
	return n, nil
}
