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

// Package framework holds what the control-plane e2e tests (test/e2e) share:
// a test's namespace and fake node (Env), sandboxes and snapshots in it, the
// TaskRun statuses the tests write in place of Tekton, and the local
// controller's processes. Package test holds what the node e2e shares too.
package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/test/helpers"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
)

const (
	// ControllerSA is the controller's identity.
	ControllerSA = "system:serviceaccount:" + test.SystemNamespace + ":sandbox-snapshot-controller"
	// E2ELabel marks what the tests create, for cleanup.
	E2ELabel = "e2e.sandbox.opensandbox.io/test"
	// Timeout bounds each wait for the controller.
	Timeout = 60 * time.Second
	// TakeoverTimeout bounds a wait that spans a leader Lease expiring
	// (test/e2e.sh shortens lease-duration to 15s).
	TakeoverTimeout = 120 * time.Second
)

var (
	metav1GetOptions = metav1.GetOptions{}
	// SnapshotGVR is the SandboxSnapshot resource, for dynamic clients.
	SnapshotGVR = v1alpha1.SchemeGroupVersion.WithResource("sandboxsnapshots")
)

// Env is one test's world: its namespace, a fake node, and a recorder of the
// TaskRuns made for snapshots of that namespace.
type Env struct {
	// T is the test.
	T *testing.T
	// Ctx ends with the test.
	Ctx context.Context
	// C are the admin clients (Clients).
	C *test.Clients
	// NS is the test's namespace.
	NS   string
	node string
	// TaskRuns records the TaskRuns of the namespace's snapshots.
	TaskRuns *TaskRunRecorder
}

// Setup makes a namespace for the test (removed at the end, and on interrupt)
// and starts recording the TaskRuns of its snapshots.
func Setup(t *testing.T) *Env {
	t.Helper()
	return SetupNamespace(t, helpers.ObjectNameForTest(t))
}

// SetupNamespace is Setup with a given namespace name.
func SetupNamespace(t *testing.T, namespace string) *Env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &Env{T: t, Ctx: ctx, C: clients, NS: namespace}

	ns := test.MustParse[corev1.Namespace](t, `
apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    %s: %q
`, e.NS, E2ELabel, "true")
	if _, err := e.C.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", e.NS, err)
	}
	t.Logf("namespace %s", e.NS)
	Cleanup(t, func() { e.deleteNamespace() })

	e.TaskRuns = recordTaskRuns(t, ctx, e.C, e.NS)
	return e
}

// deleteNamespace removes the test namespace. Its snapshots' TaskRuns live in
// the system namespace: the controller's finalizer removes them (deleting
// them here first would race with it and fail the snapshots instead).
func (e *Env) deleteNamespace() {
	if os.Getenv("E2E_KEEP_NAMESPACES") != "" {
		e.T.Logf("E2E_KEEP_NAMESPACES is set: keeping namespace %s", e.NS)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.C.Kube.CoreV1().Namespaces().Delete(ctx, e.NS, metav1.DeleteOptions{}); err != nil && !apierrs.IsNotFound(err) {
		e.T.Logf("deleting namespace %s: %v", e.NS, err)
	}
}

// ------------------------------------------------------------------ sandboxes

// Node creates, once, the fake node the test's pods are bound to, and
// returns its name. No kubelet runs in control-plane mode: the node only has
// to exist, for the pod garbage collector and for node affinity to name it,
// and a pod bound to it and deleted stays Terminating until deleted with a
// grace period of 0, as the kubelet would confirm it.
func (e *Env) Node() string {
	e.T.Helper()
	if e.node != "" {
		return e.node
	}
	name := "node-" + e.NS
	node := test.MustParse[corev1.Node](e.T, `
apiVersion: v1
kind: Node
metadata:
  name: %s
  labels:
    kubernetes.io/hostname: %[1]s
    %s: %q
`, name, E2ELabel, "true")
	if _, err := e.C.Kube.CoreV1().Nodes().Create(e.Ctx, node, metav1.CreateOptions{}); err != nil {
		e.T.Fatalf("creating node %s: %v", name, err)
	}
	Cleanup(e.T, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.C.Kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	e.node = name
	return name
}

// SandboxOpts shape a BatchSandbox and its pod.
type SandboxOpts struct {
	// Containers names the pod's containers (default app and sidecar).
	Containers []string
	// Pending leaves the pod Pending (not bound to a node, no Running status).
	Pending bool
}

// CreateSandbox creates a BatchSandbox as OpenSandbox does (its pod named in
// the alloc-status annotation) and its pod <name>-0, bound to the fake node
// and reported Running, as a kubelet would.
func (e *Env) CreateSandbox(name string, opts SandboxOpts) *corev1.Pod {
	e.T.Helper()
	if len(opts.Containers) == 0 {
		opts.Containers = []string{"app", "sidecar"}
	}
	var containers strings.Builder
	for _, c := range opts.Containers {
		fmt.Fprintf(&containers, "- name: %s\n  image: 127.0.0.1:5000/busybox:latest\n  command: [sleep, infinity]\n", c)
	}
	nodeName := ""
	if !opts.Pending {
		nodeName = e.Node()
	}
	spec := test.MustParse[corev1.PodSpec](e.T, `
nodeName: %q
automountServiceAccountToken: false
terminationGracePeriodSeconds: 0
tolerations:
- key: sandbox.opensandbox.io/dedicated
  operator: Exists
  effect: NoSchedule
containers:
%s`, nodeName, containers.String())
	e.waitForDefaultServiceAccount()
	created := test.CreateSandbox(e.Ctx, e.T, e.C, e.NS, name, *spec)
	if opts.Pending {
		return created
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "10.88.0.1",
		PodIP:     "10.88.0.201",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range opts.Containers {
		sum := sha256.Sum256([]byte(e.NS + "/" + name + "/" + c))
		created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c, Ready: true, Image: "127.0.0.1:5000/busybox:latest", ImageID: "sha256:" + hex.EncodeToString(sum[:]),
			ContainerID: "containerd://" + hex.EncodeToString(sum[:]),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	running, err := e.C.Kube.CoreV1().Pods(e.NS).UpdateStatus(e.Ctx, created, metav1.UpdateOptions{})
	if err != nil {
		e.T.Fatalf("marking pod %s Running: %v", created.Name, err)
	}
	return running
}

// waitForDefaultServiceAccount waits for the namespace's default
// ServiceAccount: pods are refused until kube-controller-manager made it.
func (e *Env) waitForDefaultServiceAccount() {
	e.T.Helper()
	test.Until(e.Ctx, e.T, Timeout, "the default ServiceAccount of "+e.NS, &corev1.ServiceAccount{},
		test.ListWatch(e.C.Kube.CoreV1().ServiceAccounts(e.NS), test.Named("default")),
		nil, func(ev watch.Event) (bool, error) { return ev.Type != watch.Deleted, nil })
}

// ------------------------------------------------------------------ snapshots

// CreateSnapshot creates a SandboxSnapshot of a sandbox.
func (e *Env) CreateSnapshot(name, sandboxName string) *v1alpha1.SandboxSnapshot {
	e.T.Helper()
	return test.CreateSnapshot(e.Ctx, e.T, e.C, e.NS, name, sandboxName)
}

// SnapshotLW lists and watches one snapshot, or all of the namespace when name is empty.
func (e *Env) SnapshotLW(name string) cache.ListerWatcher {
	return test.ListWatch(e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS), test.Named(name))
}

// WaitSnapshot watches a snapshot until cond holds and returns it.
func (e *Env) WaitSnapshot(name, what string, cond func(*v1alpha1.SandboxSnapshot) bool) *v1alpha1.SandboxSnapshot {
	e.T.Helper()
	var last *v1alpha1.SandboxSnapshot
	ev := test.Until(e.Ctx, e.T, Timeout, fmt.Sprintf("SandboxSnapshot %s/%s %s", e.NS, name, what), &v1alpha1.SandboxSnapshot{},
		e.SnapshotLW(name), nil, func(ev watch.Event) (bool, error) {
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("SandboxSnapshot %s/%s was deleted", e.NS, name)
			}
			last = ev.Object.(*v1alpha1.SandboxSnapshot)
			return cond(last), nil
		}, func() string { return Dump(last) })
	return ev.Object.(*v1alpha1.SandboxSnapshot)
}

// WaitSnapshotGone waits until a snapshot no longer exists.
func (e *Env) WaitSnapshotGone(name string) {
	e.T.Helper()
	test.WaitForSnapshotGone(e.Ctx, e.T, e.C, e.NS, name, Timeout)
}

// WaitAllTerminal waits until the namespace holds want snapshots, all Succeed or Failed.
func (e *Env) WaitAllTerminal(want int, within time.Duration) []*v1alpha1.SandboxSnapshot {
	e.T.Helper()
	var store cache.Store
	describe := func() string {
		var b strings.Builder
		if store != nil {
			for _, o := range store.List() {
				s := o.(*v1alpha1.SandboxSnapshot)
				fmt.Fprintf(&b, "%s: %q\n", s.Name, s.Status.Phase)
			}
		}
		return b.String()
	}
	allDone := func(s cache.Store) (bool, error) {
		store = s
		items := s.List()
		if len(items) != want {
			return false, nil
		}
		for _, o := range items {
			if !o.(*v1alpha1.SandboxSnapshot).Status.IsTerminal() {
				return false, nil
			}
		}
		return true, nil
	}
	test.Until(e.Ctx, e.T, within, fmt.Sprintf("%d snapshots in %s to end", want, e.NS), &v1alpha1.SandboxSnapshot{}, e.SnapshotLW(""),
		allDone, func(watch.Event) (bool, error) { return allDone(store) }, describe)
	out := make([]*v1alpha1.SandboxSnapshot, 0, want)
	for _, o := range store.List() {
		out = append(out, o.(*v1alpha1.SandboxSnapshot))
	}
	return out
}

// IsPhase is a WaitSnapshot condition: the snapshot is in phase p.
func IsPhase(p v1alpha1.SandboxSnapshotPhase) func(*v1alpha1.SandboxSnapshot) bool {
	return func(s *v1alpha1.SandboxSnapshot) bool { return s.Status.Phase == p }
}

// IsTerminal is a WaitSnapshot condition: the snapshot is Succeed or Failed.
func IsTerminal(s *v1alpha1.SandboxSnapshot) bool { return s.Status.IsTerminal() }

// Dump renders obj as YAML for a failure message.
func Dump(obj any) string {
	if obj == nil {
		return "(nothing)"
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Sprintf("%+v", obj)
	}
	return string(b)
}

// ------------------------------------------------------------------- TaskRuns

// TaskRunRecorder watches the TaskRuns made for one namespace's snapshots
// (they live in the system namespace) and counts how often each is created.
type TaskRunRecorder struct {
	informer cache.SharedIndexInformer
	mu       sync.Mutex
	adds     map[string]int
	deletes  map[string]int
	// cancelled records TaskRuns seen with spec.status TaskRunCancelled.
	cancelled map[string]bool
}

func recordTaskRuns(t *testing.T, ctx context.Context, c *test.Clients, ns string) *TaskRunRecorder {
	t.Helper()
	sel := test.TaskRunSelector(ns, "")
	r := &TaskRunRecorder{adds: map[string]int{}, deletes: map[string]int{}, cancelled: map[string]bool{}}
	r.informer = cache.NewSharedIndexInformer(
		test.ListWatch(c.Pipeline.TektonV1().TaskRuns(test.SystemNamespace), metav1.ListOptions{LabelSelector: sel}),
		&pipelinev1.TaskRun{}, 0, cache.Indexers{})
	seen := func(obj any) {
		if tr, ok := obj.(*pipelinev1.TaskRun); ok && tr.Spec.Status == pipelinev1.TaskRunSpecStatusCancelled {
			r.cancelled[tr.Name] = true
		}
	}
	if _, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.adds[obj.(*pipelinev1.TaskRun).Name]++
			seen(obj)
		},
		UpdateFunc: func(_, obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			seen(obj)
		},
		DeleteFunc: func(obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			tr := obj.(*pipelinev1.TaskRun)
			r.deletes[tr.Name]++
			seen(obj)
		},
	}); err != nil {
		t.Fatal(err)
	}
	go r.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced) {
		t.Fatalf("TaskRun informer for %s did not sync", sel)
	}
	return r
}

// Created returns how many times each TaskRun was created.
func (r *TaskRunRecorder) Created() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.adds))
	for k, v := range r.adds {
		out[k] = v
	}
	return out
}

// Deleted returns how many times the TaskRun name was deleted.
func (r *TaskRunRecorder) Deleted(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deletes[name]
}

// WaitDeleted waits, up to Timeout, until the TaskRun name was seen deleted
// at least n times (this recorder's watch may lag behind another's), and
// returns how many times it was.
func (r *TaskRunRecorder) WaitDeleted(ctx context.Context, name string, n int) int {
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, Timeout, true, func(context.Context) (bool, error) {
		return r.Deleted(name) >= n, nil
	})
	return r.Deleted(name)
}

// WasCancelled reports whether the TaskRun name was seen with spec.status TaskRunCancelled.
func (r *TaskRunRecorder) WasCancelled(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelled[name]
}

// TaskRunsOf lists the TaskRuns labelled with a snapshot's name and namespace.
func (e *Env) TaskRunsOf(snapshot string) []pipelinev1.TaskRun {
	e.T.Helper()
	return test.TaskRunsOf(e.Ctx, e.T, e.C, e.NS, snapshot)
}

// taskRunLW lists and watches one TaskRun of the system namespace.
func (e *Env) taskRunLW(name string) cache.ListerWatcher {
	return test.ListWatch(e.C.Pipeline.TektonV1().TaskRuns(test.SystemNamespace), test.Named(name))
}

// WaitTaskRun waits for a TaskRun to exist (and cond to hold) and returns it.
func (e *Env) WaitTaskRun(name, what string, cond func(*pipelinev1.TaskRun) bool) *pipelinev1.TaskRun {
	e.T.Helper()
	var last *pipelinev1.TaskRun
	ev := test.Until(e.Ctx, e.T, Timeout, "TaskRun "+name+" "+what, &pipelinev1.TaskRun{}, e.taskRunLW(name), nil,
		func(ev watch.Event) (bool, error) {
			if ev.Type == watch.Deleted {
				return false, nil
			}
			last = ev.Object.(*pipelinev1.TaskRun)
			return cond == nil || cond(last), nil
		}, func() string { return Dump(last) })
	return ev.Object.(*pipelinev1.TaskRun)
}

// WaitTaskRunGone waits until a TaskRun no longer exists.
func (e *Env) WaitTaskRunGone(name string) {
	e.T.Helper()
	key := test.SystemNamespace + "/" + name
	test.UntilGone(e.Ctx, e.T, Timeout, "TaskRun "+key+" to be deleted", &pipelinev1.TaskRun{}, e.taskRunLW(name), key)
}

// SetTaskRunStatus plays Tekton: it writes a TaskRun's status.
func (e *Env) SetTaskRunStatus(name string, mutate func(*pipelinev1.TaskRun)) *pipelinev1.TaskRun {
	e.T.Helper()
	tr, err := setTaskRunStatus(e.Ctx, e.C, name, mutate)
	if err != nil {
		e.T.Fatalf("writing the status of TaskRun %s: %v", name, err)
	}
	return tr
}

func setTaskRunStatus(ctx context.Context, c *test.Clients, name string, mutate func(*pipelinev1.TaskRun)) (*pipelinev1.TaskRun, error) {
	trs := c.Pipeline.TektonV1().TaskRuns(test.SystemNamespace)
	var out *pipelinev1.TaskRun
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tr, err := trs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(tr)
		out, err = trs.UpdateStatus(ctx, tr, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

// Running is the status Tekton writes once the commit step runs.
func Running(tr *pipelinev1.TaskRun) {
	now := metav1.Now()
	tr.Status.StartTime = &now
	tr.Status.PodName = tr.Name + "-pod"
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown,
		Reason: string(pipelinev1.TaskRunReasonRunning), Message: "Not all Steps in the Task have finished executing"})
	tr.Status.Steps = []pipelinev1.StepState{{Name: task.StepCommit, Container: "step-commit",
		ContainerState: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
}

// Succeeded is the status of a commit that pushed one image per container,
// with the results the committer writes.
func Succeeded(pauseMS int64, digests ...string) func(*pipelinev1.TaskRun) {
	return func(tr *pipelinev1.TaskRun) {
		now := metav1.Now()
		if tr.Status.StartTime == nil {
			tr.Status.StartTime = &now
		}
		tr.Status.CompletionTime = &now
		tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue,
			Reason: string(pipelinev1.TaskRunReasonSuccessful), Message: "All Steps have completed executing"})
		tr.Status.Results = []pipelinev1.TaskRunResult{
			{Name: task.ResultDigests, Type: pipelinev1.ResultsTypeString, Value: *pipelinev1.NewStructuredValues(task.FormatDigests(digests))},
			{Name: task.ResultPauseWindowMS, Type: pipelinev1.ResultsTypeString, Value: *pipelinev1.NewStructuredValues(strconv.FormatInt(pauseMS, 10))},
		}
		tr.Status.Steps = []pipelinev1.StepState{
			{Name: task.StepCommit, Container: "step-commit", ContainerState: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}},
			{Name: task.StepPush, Container: "step-push", ContainerState: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}},
		}
	}
}

// CancelledMidCommit is the status Tekton writes for a TaskRun cancelled
// while its commit step ran: the step, whose container exists (it has an
// image ID), ends with the TaskRun's reason.
var CancelledMidCommit = Failed(pipelinev1.TaskRunReasonCancelled, "TaskRun was cancelled: SandboxSnapshot deleted",
	pipelinev1.StepState{Name: task.StepCommit, Container: "step-commit", ImageID: "127.0.0.1:5000/committer@sha256:0123",
		ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: pipelinev1.TaskRunReasonCancelled.String()}}})

// Failed is the status of a TaskRun that failed with reason, e.g. TaskRunTimeout.
func Failed(reason pipelinev1.TaskRunReason, message string, steps ...pipelinev1.StepState) func(*pipelinev1.TaskRun) {
	return func(tr *pipelinev1.TaskRun) {
		now := metav1.Now()
		tr.Status.CompletionTime = &now
		tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse,
			Reason: string(reason), Message: message})
		tr.Status.Steps = steps
	}
}

// DigestsFor makes one well-formed digest per container of a commit TaskRun.
func DigestsFor(tr *pipelinev1.TaskRun) []string {
	var out []string
	for _, p := range tr.Spec.Params {
		if p.Name == task.ParamContainers {
			for _, item := range p.Value.ArrayVal {
				sum := sha256.Sum256([]byte(tr.Name + "/" + item))
				out = append(out, "sha256:"+hex.EncodeToString(sum[:]))
			}
		}
	}
	return out
}

// OwnStatusFields reports whether the installed SandboxSnapshot CRD keeps
// the operator's own status fields (taskRunRef, thaw, ...). OpenSandbox's
// CRD (SNAPSHOT_CRDS=opensandbox) prunes them; tests then find TaskRuns by
// their names, as the operator does.
func OwnStatusFields() bool {
	return os.Getenv("SNAPSHOT_CRDS") != "opensandbox"
}

// AutoSucceed plays Tekton for every commit TaskRun of the env's namespace,
// present and future: each is marked Succeeded with valid results. It stops
// when the test ends.
func (e *Env) AutoSucceed() {
	e.T.Helper()
	e.playTekton(func(*pipelinev1.TaskRun) bool { return true }, func(tr *pipelinev1.TaskRun) {
		Succeeded(7, DigestsFor(tr)...)(tr)
	})
}

// AutoCancel plays Tekton's part in a cancellation for every TaskRun of the
// env's namespace, present and future: a TaskRun whose spec.status is
// TaskRunCancelled ends Failed with reason TaskRunCancelled, before its
// commit step started (so nothing needs a thaw). It stops when the test ends.
func (e *Env) AutoCancel() {
	e.T.Helper()
	e.playTekton(func(tr *pipelinev1.TaskRun) bool {
		return tr.Spec.Status == pipelinev1.TaskRunSpecStatusCancelled
	}, Failed(pipelinev1.TaskRunReasonCancelled, "TaskRun was cancelled"))
}

// playTekton ends, as end says, every unfinished TaskRun of this operator
// that selected picks, present and future. It stops when the test ends.
func (e *Env) playTekton(selected func(*pipelinev1.TaskRun) bool, end func(*pipelinev1.TaskRun)) {
	e.T.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool
	)
	ctx, cancel := context.WithCancel(e.Ctx)
	e.T.Cleanup(func() {
		mu.Lock()
		stopped = true
		cancel()
		mu.Unlock()
		wg.Wait()
	})
	complete := func(obj any) {
		tr, ok := obj.(*pipelinev1.TaskRun)
		if !ok || tr.IsDone() || tr.Labels[sandbox.ManagedByLabel] == "" || !selected(tr) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := setTaskRunStatus(ctx, e.C, tr.Name, func(cur *pipelinev1.TaskRun) {
				if !cur.IsDone() {
					end(cur)
				}
			})
			if err != nil && ctx.Err() == nil && !apierrs.IsNotFound(err) {
				e.T.Errorf("ending TaskRun %s: %v", tr.Name, err)
			}
		}()
	}
	if _, err := e.TaskRuns.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: complete, UpdateFunc: func(_, obj any) { complete(obj) },
	}); err != nil {
		e.T.Fatal(err)
	}
}

// --------------------------------------------------------- controller, tools

// Controller runs test/cluster/run-controller.sh with args and returns its stdout.
func Controller(t *testing.T, args ...string) string {
	t.Helper()
	out, err := Run(t, filepath.Join(repoRoot, "test", "cluster", "run-controller.sh"), args...)
	if err != nil {
		t.Fatalf("test/cluster/run-controller.sh %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// Run runs a command from the repository root, logs its output and returns stdout.
func Run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	return RunContext(context.Background(), t, name, args...)
}

// RunContext is Run under ctx.
func RunContext(ctx context.Context, t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	stdout, stderr, err := test.Run(cmd)
	t.Logf("$ %s %s\n%s%s", filepath.Base(name), strings.Join(args, " "), stdout, stderr)
	return stdout, err
}

// Tool finds a CLI: on PATH (test/cluster/env.sh puts the built ones first), else in _output/tools.
func Tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	matches, _ := filepath.Glob(filepath.Join(repoRoot, "_output", "tools", name+"-*", name))
	if len(matches) == 0 {
		t.Fatalf("%s not found on PATH nor in _output/tools: run hack/build-tools.sh %s", name, name)
	}
	return matches[len(matches)-1]
}

// ControllerPIDs returns the pids of the running controller instances.
func ControllerPIDs() map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "_output", "cluster", "pids", "controller-*.pid"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if strings.HasSuffix(name, "-watchdog") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			out[name] = pid
		}
	}
	return out
}

// EnsureOneController leaves exactly instance 1 running, the state the tests start from.
func EnsureOneController(t *testing.T) {
	t.Helper()
	pids := ControllerPIDs()
	if _, ok := pids["controller-1"]; !ok {
		Controller(t, "start", "1")
	}
	for name := range pids {
		if name != "controller-1" {
			Controller(t, "stop", strings.TrimPrefix(name, "controller-"))
		}
	}
}

// Condition returns a snapshot's condition of type ct, failing the test if it is missing.
func Condition(t *testing.T, s *v1alpha1.SandboxSnapshot, ct string) metav1.Condition {
	t.Helper()
	c := s.Status.GetCondition(ct)
	if c == nil {
		t.Fatalf("SandboxSnapshot %s has no %s condition:\n%s", s.Name, ct, Dump(s.Status))
	}
	return *c
}
