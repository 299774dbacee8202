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
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pipelineinformers "github.com/tektoncd/pipeline/pkg/client/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxinformers "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/informers/externalversions"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/proc"
)

// limitWorkers is how many snapshots the write-only client carries at once.
const limitWorkers = 32

// limitRegistry stands in for config-snapshot's registry when it is not set
// yet (the controller's start sets it); it only shapes the TaskRun.
const limitRegistry = "registry.bench.test/snapshots"

// limitNamespace holds the write-only client's snapshots, apart from the
// burst's, so that neither sees the other's objects.
func (o *options) limitNamespace() string { return o.namespace() + "-limit" }

// limit measures what the API server allows for a snapshot's writes, with no
// controller running: limitWorkers workers each take the next snapshot and
// make, one after the other and with no reads and no logic, the writes of
// its life in the burst. The harness's two (create the snapshot; complete
// its TaskRun, Tekton's part) and the four the controller cannot avoid: the
// finalizer patch, the TaskRun create, Committing and Succeed. The same
// watches as the burst's harness run meanwhile. Its snapshots and TaskRuns
// are removed before it returns, so the controller started next never sees
// them.
func limit(ctx context.Context, c *clients, o *options) error {
	ns := o.limitNamespace()
	cfg, pods, err := limitWorld(ctx, c, o)
	if err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"app.kubernetes.io/part-of": "sso-bench"}}}, metav1.CreateOptions{}); err != nil && !apierrs.IsAlreadyExists(err) {
		return err
	}
	defer func() {
		if err := limitCleanup(context.WithoutCancel(ctx), c, o); err != nil {
			logf("limit: cleanup: %v", err)
		}
	}()

	stop := make(chan struct{})
	defer close(stop)
	snapshots := sandboxinformers.NewSharedInformerFactoryWithOptions(c.sandbox, 0, sandboxinformers.WithNamespace(ns)).
		Sandbox().V1alpha1().SandboxSnapshots().Informer()
	taskRuns := pipelineinformers.NewSharedInformerFactoryWithOptions(c.pipeline, 0,
		pipelineinformers.WithNamespace(systemNamespace),
		pipelineinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sandbox.SnapshotNamespaceLabel + "=" + ns }),
	).Tekton().V1().TaskRuns().Informer()
	go snapshots.Run(stop)
	go taskRuns.Run(stop)
	if !cache.WaitForCacheSync(ctx.Done(), snapshots.HasSynced, taskRuns.HasSynced) {
		return fmt.Errorf("informers did not sync")
	}

	quiesce(ctx, c)
	apiCPUBefore, etcdCPUBefore, ownCPUBefore := proc.CPUSeconds(o.apiPid), proc.CPUSeconds(o.etcdPid), proc.OwnCPUSeconds()
	busyBefore, totalBefore := machineCPU()
	var writes atomic.Int64
	toTR, toDone, doneAt := make([]float64, o.n), make([]float64, o.n), make([]float64, o.n)
	start := time.Now()
	err = parallel(ctx, o.n, limitWorkers, func(i int) error {
		w, err := limitOne(ctx, c, ns, i+1, cfg, pods[sandboxName(i+1)], toTR, toDone)
		writes.Add(int64(w))
		doneAt[i] = time.Since(start).Seconds()
		return err
	})
	wall := time.Since(start).Seconds()
	if err != nil {
		return fmt.Errorf("write-only client: %w", err)
	}
	busy, total := machineCPU()
	res := result{Mode: modeLimit, Trial: o.trial, N: o.n, Containers: o.containers, Succeeded: o.n, WallSecs: wall}
	res.ToTaskRun, res.ToSucceed = summarize(toTR), summarize(toDone)
	sort.Float64s(doneAt)
	res.OverallRate = float64(o.n) / wall
	if lo, hi := o.n/10, o.n*9/10-1; hi > lo && doneAt[hi] > doneAt[lo] {
		res.SteadyRate = float64(hi-lo) / (doneAt[hi] - doneAt[lo])
	}
	res.ObjectWrites = float64(writes.Load())
	res.ApiserverCPUSecs, res.EtcdCPUSecs = proc.CPUSeconds(o.apiPid)-apiCPUBefore, proc.CPUSeconds(o.etcdPid)-etcdCPUBefore
	res.HarnessCPUSecs = proc.OwnCPUSeconds() - ownCPUBefore
	res.MachineCores = runtime.NumCPU()
	if total > totalBefore {
		res.MachineBusyCores = float64(res.MachineCores) * (busy - busyBefore) / (total - totalBefore)
	}
	logf("limit: %d snapshots' writes done in %.2fs (%.1f/s)", o.n, wall, res.OverallRate)
	return res.write(o.out)
}

// limitWorld reads what the TaskRuns are made from: config-snapshot, and
// the pod of each sandbox that setup made.
func limitWorld(ctx context.Context, c *clients, o *options) (*config.Snapshot, map[string]*corev1.Pod, error) {
	cm, err := c.kube.CoreV1().ConfigMaps(systemNamespace).Get(ctx, config.SnapshotConfigName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if cm.Data[config.RegistryKey] == "" {
		cm.Data[config.RegistryKey] = limitRegistry
	}
	cfg, err := config.NewSnapshotFromConfigMap(cm)
	if err != nil {
		return nil, nil, err
	}
	list, err := c.kube.CoreV1().Pods(o.namespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		pods[list.Items[i].Labels[sandbox.BatchSandboxPodLabel]] = &list.Items[i]
	}
	for i := 1; i <= o.n; i++ {
		if pods[sandboxName(i)] == nil {
			return nil, nil, fmt.Errorf("no pod of sandbox %s/%s: run bench setup first", o.namespace(), sandboxName(i))
		}
	}
	return cfg, pods, nil
}

// limitOne makes snapshot i's six writes, records its latencies, and
// returns how many of the controller's four it made.
func limitOne(ctx context.Context, c *clients, ns string, i int, cfg *config.Snapshot, pod *corev1.Pod, toTR, toDone []float64) (int, error) {
	snapshots := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns)
	s, err := snapshots.Create(ctx, &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: snapshotName(i), Namespace: ns},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName(i)},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, err
	}
	created := time.Now()

	// The generated reconciler's finalizer patch.
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q],"resourceVersion":%q}}`, sandboxsnapshot.FinalizerName, s.ResourceVersion)
	if s, err = snapshots.Patch(ctx, s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return 0, err
	}

	src := resources.Source{Pod: pod, Containers: make([]v1alpha1.ContainerSnapshot, len(pod.Spec.Containers))}
	for j, ctr := range pod.Spec.Containers {
		uri, err := snapshotimage.URI(cfg.Registry, ns, s.Spec.SandboxName, ctr.Name, string(s.UID))
		if err != nil {
			return 1, err
		}
		src.Containers[j] = v1alpha1.ContainerSnapshot{ContainerName: ctr.Name, ImageURI: uri}
	}
	tr, err := c.pipeline.TektonV1().TaskRuns(systemNamespace).Create(ctx, resources.MakeTaskRun(s, src, cfg, systemNamespace), metav1.CreateOptions{})
	if err != nil {
		return 1, err
	}
	toTR[i-1] = time.Since(created).Seconds()

	now := metav1.Now()
	s.Status.ObservedGeneration = s.Generation
	s.Status.InitializeConditions(now)
	s.Status.MarkCommitting(now, pod.Name, pod.Spec.NodeName, src.Containers,
		v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}, tr.CreationTimestamp)
	if s, err = snapshots.UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		return 2, err
	}

	// Tekton's part, as the burst's harness plays it.
	if err := complete(ctx, c, tr); err != nil {
		return 3, err
	}

	digests := make([]string, len(src.Containers))
	for j := range digests {
		digests[j] = "sha256:" + fmt.Sprintf("%064x", j)
	}
	pause := int64(250)
	s.Status.MarkSucceeded(metav1.Now(), digests, &pause, v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name})
	if _, err := snapshots.UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		return 3, err
	}
	toDone[i-1] = time.Since(created).Seconds()
	return 4, nil
}

// limitCleanup removes the write-only client's snapshots (finalizers first:
// no controller runs to remove them), their TaskRuns and its namespace.
func limitCleanup(ctx context.Context, c *clients, o *options) error {
	ns := o.limitNamespace()
	snapshots := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns)
	list, err := snapshots.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var first error
	_ = parallel(ctx, len(list.Items), limitWorkers, func(i int) error {
		_, err := snapshots.Patch(ctx, list.Items[i].Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err = ignoreNotFound(err); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
		return nil
	})
	if first != nil {
		return first
	}
	selector := sandbox.SnapshotNamespaceLabel + "=" + ns
	if err := c.pipeline.TektonV1().TaskRuns(systemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		return err
	}
	if err := ignoreNotFound(c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})); err != nil {
		return err
	}
	return poll(ctx, o.timeout, func() (bool, error) {
		trs, err := c.pipeline.TektonV1().TaskRuns(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		_, err = c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return len(trs.Items) == 0 && apierrs.IsNotFound(err), ignoreNotFound(err)
	})
}
