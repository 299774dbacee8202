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
	"slices"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	fakepipelineclient "github.com/tektoncd/pipeline/pkg/client/injection/client/fake"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	_ "knative.dev/pkg/client/injection/kube/informers/batch/v1/job/filtered/fake"
	filteredinformerfactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	_ "knative.dev/pkg/client/injection/kube/informers/factory/filtered/fake"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/reconciler"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	fakesandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/client/fake"
	_ "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/batchsandbox/fake"
	_ "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/sandboxsnapshot/fake"
	_ "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/podinformer/fake"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
)

// TestNewControllerEnqueuesOnlyItsClass checks the wiring: snapshots of this
// operator's class or carrying its finalizer, and TaskRuns with its labels,
// reach the work queue, while snapshots left to another controller never do.
// A commit that ends wakes the snapshots waiting for its pod.
func TestNewControllerEnqueuesOnlyItsClass(t *testing.T) {
	ctx, impl := startController(t, map[string]string{config.RegistryKey: "r.test", config.DefaultClassKey: "opensandbox"})

	snapshots := fakesandboxclient.Get(ctx).SandboxV1alpha1().SandboxSnapshots("team-a")
	for _, s := range []*v1alpha1.SandboxSnapshot{
		Snapshot("team-a", "unannotated", "sb"),
		Snapshot("team-a", "foreign", "sb", WithAnnotation(sandbox.ClassAnnotation, "opensandbox")),
		Snapshot("team-a", "ours", "sb", WithAnnotation(sandbox.ClassAnnotation, sandbox.TektonClass)),
		// Ours before the class changed: it keeps being reconciled.
		Snapshot("team-a", "finalized", "sb", WithFinalizers(FinalizerName)),
	} {
		if _, err := snapshots.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := drainQueue(t, impl, 2), []string{"team-a/finalized", "team-a/ours"}; !slices.Equal(got, want) {
		t.Errorf("enqueued %v, want %v", got, want)
	}

	taskRuns := fakepipelineclient.Get(ctx).TektonV1().TaskRuns(system.Namespace())
	tr := resources.MakeTaskRun(Snapshot("team-a", "ours", "sb"), resources.Source{Pod: runningPod, Containers: committed},
		defaultCfg, system.Namespace())
	if _, err := taskRuns.Create(ctx, tr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := drainQueue(t, impl, 1), []string{"team-a/ours"}; !slices.Equal(got, want) {
		t.Errorf("a TaskRun enqueued %v, want its snapshot %v", got, want)
	}

	// A snapshot of the same sandbox waits for that commit to end.
	if _, err := snapshots.Create(ctx, Snapshot("team-a", "waiting", "sb", WithFinalizers(FinalizerName),
		WithWaiting("Waiting for SandboxSnapshot team-a/ours")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drainQueue(t, impl, 1)
	if _, err := taskRuns.Update(ctx, TaskRun(tr, WithTaskRunRunning), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := drainQueue(t, impl, 1), []string{"team-a/ours"}; !slices.Equal(got, want) {
		t.Errorf("a running TaskRun enqueued %v, want only its snapshot %v", got, want)
	}
	if _, err := taskRuns.Update(ctx, TaskRun(tr, WithTaskRunSucceeded), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := drainQueue(t, impl, 2), []string{"team-a/ours", "team-a/waiting"}; !slices.Equal(got, want) {
		t.Errorf("a finished TaskRun enqueued %v, want its snapshot and the one waiting %v", got, want)
	}
}

// TestNewControllerWakesTheSnapshotOfAnOpenSandboxJob checks that a commit
// Job of OpenSandbox's own controller queues the snapshot controlling it when
// it changes: a snapshot waits for such a Job to end.
func TestNewControllerWakesTheSnapshotOfAnOpenSandboxJob(t *testing.T) {
	ctx, impl := startController(t, map[string]string{config.RegistryKey: "r.test"})

	s := Snapshot("team-a", "sb-pause", "sb", WithFinalizers(FinalizerName, sandbox.OpenSandboxSnapshotFinalizer))
	if _, err := fakesandboxclient.Get(ctx).SandboxV1alpha1().SandboxSnapshots("team-a").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drainQueue(t, impl, 1)

	jobs := fakekubeclient.Get(ctx).BatchV1().Jobs("team-a")
	job, err := jobs.Create(ctx, OpenSandboxCommitJob(s), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := drainQueue(t, impl, 1), []string{"team-a/sb-pause"}; !slices.Equal(got, want) {
		t.Errorf("a new Job enqueued %v, want its snapshot %v", got, want)
	}
	if _, err := jobs.Update(ctx, OpenSandboxCommitJob(s, WithJobComplete), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := drainQueue(t, impl, 1), []string{"team-a/sb-pause"}; !slices.Equal(got, want) {
		t.Errorf("a Job that ended enqueued %v, want its snapshot %v", got, want)
	}

	// A Job no snapshot controls, or one of a snapshot of another class,
	// queues nothing: of these three, only the last queues its snapshot (an
	// informer hands its events over in order). (The fake client's watch
	// ignores the informer's label selector, which the API server applies.)
	foreign := Snapshot("team-a", "foreign", "sb", WithAnnotation(sandbox.ClassAnnotation, "opensandbox"),
		WithFinalizers(sandbox.OpenSandboxSnapshotFinalizer))
	last := Snapshot("team-a", "last", "sb", WithFinalizers(FinalizerName, sandbox.OpenSandboxSnapshotFinalizer))
	for _, s := range []*v1alpha1.SandboxSnapshot{foreign, last} {
		if _, err := fakesandboxclient.Get(ctx).SandboxV1alpha1().SandboxSnapshots("team-a").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drainQueue(t, impl, 1)
	stray := job.DeepCopy()
	stray.Name, stray.OwnerReferences = "stray", nil
	for _, j := range []*batchv1.Job{stray, OpenSandboxCommitJob(foreign), OpenSandboxCommitJob(last)} {
		if _, err := jobs.Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := drainQueue(t, impl, 1), []string{"team-a/last"}; !slices.Equal(got, want) {
		t.Errorf("Jobs enqueued %v, want only %v", got, want)
	}
	if n := impl.WorkQueue().Len(); n != 0 {
		t.Errorf("%d more key(s) queued", n)
	}
}

// startController starts NewController on fake clients and informers, with
// config-snapshot holding data, until the test ends.
func startController(t *testing.T, data map[string]string) (context.Context, *controller.Impl) {
	t.Helper()
	ctx, cancel, informers := rtesting.SetupFakeContextWithCancel(t, func(ctx context.Context) context.Context {
		return filteredinformerfactory.WithSelectors(ctx, OpenSandboxJobSelector)
	})
	cmw := configmap.NewStaticWatcher(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: config.SnapshotConfigName, Namespace: system.Namespace()},
		Data:       data,
	})
	impl := NewController(ctx, cmw)
	if err := cmw.Start(ctx.Done()); err != nil {
		t.Fatalf("starting the config watcher: %v", err)
	}
	stop, err := rtesting.RunAndSyncInformers(ctx, informers...)
	if err != nil {
		t.Fatalf("starting informers: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		stop()
	})
	return ctx, impl
}

// drainQueue waits for n keys in impl's work queue and returns them sorted.
func drainQueue(t *testing.T, impl *controller.Impl, n int) []string {
	t.Helper()
	waitForQueue(t, impl.WorkQueue().Len, n)
	keys := make([]string, 0, n)
	for range n {
		key, _ := impl.WorkQueue().Get()
		keys = append(keys, key.(types.NamespacedName).String())
		impl.WorkQueue().Done(key)
	}
	slices.Sort(keys)
	return keys
}

func waitForQueue(t *testing.T, length func() int, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		return length() == want, nil
	})
	if err != nil {
		t.Fatalf("work queue holds %d keys, want %d", length(), want)
	}
}

// TestNewControllerQueuesNewSnapshotsBehindOtherWork checks the intake:
// new snapshots enter the work queue only while it holds fewer keys than
// there are workers, a TaskRun's snapshot goes ahead of those still held, and
// each finished pass lets the next ones in.
func TestNewControllerQueuesNewSnapshotsBehindOtherWork(t *testing.T) {
	ctx, impl := startController(t, map[string]string{config.RegistryKey: "r.test"})
	if impl.Concurrency != 2 {
		t.Fatalf("the controller has %d workers, this test is written for 2", impl.Concurrency)
	}

	snapshots := fakesandboxclient.Get(ctx).SandboxV1alpha1().SandboxSnapshots("team-a")
	for _, name := range []string{"new-1", "new-2", "new-3", "new-4"} {
		if _, err := snapshots.Create(ctx, Snapshot("team-a", name, "sb-"+name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForQueue(t, impl.WorkQueue().Len, 2)

	// A commit of a snapshot already under way moves on ahead of the two
	// new snapshots still held back.
	tr := resources.MakeTaskRun(Snapshot("team-a", "under-way", "sb"), resources.Source{Pod: runningPod, Containers: committed},
		defaultCfg, system.Namespace())
	if _, err := fakepipelineclient.Get(ctx).TektonV1().TaskRuns(system.Namespace()).Create(ctx, tr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, want := drainQueue(t, impl, 3), []string{"team-a/new-1", "team-a/new-2", "team-a/under-way"}
	if !slices.Equal(got, want) {
		t.Errorf("enqueued %v, want %v", got, want)
	}
	if n := impl.WorkQueue().Len(); n != 0 {
		t.Errorf("the queue holds %d keys before any pass finished, want 0", n)
	}

	// The passes of the keys taken (here skipped ones: this replica does not
	// lead) make room.
	for _, key := range got {
		_ = impl.Reconciler.Reconcile(ctx, key)
	}
	if got, want := drainQueue(t, impl, 2), []string{"team-a/new-3", "team-a/new-4"}; !slices.Equal(got, want) {
		t.Errorf("after a pass, enqueued %v, want %v", got, want)
	}
}

// TestIntakeCountsKeysUntilTheirPassBegins: the intake lets no more new
// snapshots in than there are workers until their passes begin, whatever
// the queue's length says, and lets them in in the order they came.
func TestIntakeCountsKeysUntilTheirPassBegins(t *testing.T) {
	a := newIntake(&controller.Impl{Concurrency: 2})
	for _, name := range []string{"new-1", "new-2", "new-3"} {
		a.add(Snapshot("team-a", name, "sb"))
	}
	var in []string
	for range 3 {
		if key, ok := a.next(); ok {
			in = append(in, key.String())
		}
	}
	if want := []string{"team-a/new-1", "team-a/new-2"}; !slices.Equal(in, want) {
		t.Fatalf("let in %v before any pass began, want %v", in, want)
	}
	a.began("team-a/new-2")
	if key, ok := a.next(); !ok || key.String() != "team-a/new-3" {
		t.Errorf("after a pass began, next() = %v, %t, want team-a/new-3", key, ok)
	}
}

// TestPassGateSkipsAndNotifies checks the wrapper around the generated
// reconciler: a pass that skip names does not reach the reconciler, the
// observer is told of every pass's beginning and end, and the wrapper stays
// leader-aware.
func TestPassGateSkipsAndNotifies(t *testing.T) {
	inner := &recordingReconciler{}
	impl := &controller.Impl{Reconciler: inner}
	obs := &recordingObserver{}
	filterPasses(impl, func(key string) bool { return key == "ns/stale" }, obs)

	for _, key := range []string{"ns/stale", "ns/fresh"} {
		if err := impl.Reconciler.Reconcile(context.Background(), key); err != nil {
			t.Fatalf("Reconcile(%s) = %v", key, err)
		}
	}
	if want := []string{"ns/fresh"}; !slices.Equal(inner.keys, want) {
		t.Errorf("the reconciler saw %v, want %v", inner.keys, want)
	}
	if want := []string{"ns/stale", "ns/fresh"}; !slices.Equal(obs.begun, want) || obs.ended != 2 {
		t.Errorf("the observer saw %v begin and %d end, want %v and 2", obs.begun, obs.ended, want)
	}
	if _, ok := impl.Reconciler.(reconciler.LeaderAware); !ok {
		t.Error("the wrapped reconciler is not leader-aware")
	}
}

type recordingObserver struct {
	begun []string
	ended int
}

func (o *recordingObserver) began(key string) { o.begun = append(o.begun, key) }
func (o *recordingObserver) notify()          { o.ended++ }

type recordingReconciler struct {
	reconciler.LeaderAwareFuncs
	keys []string
}

func (r *recordingReconciler) Reconcile(_ context.Context, key string) error {
	r.keys = append(r.keys, key)
	return nil
}

// TestWaitingSnapshots finds, through the sandbox index, the Pending
// snapshots of a TaskRun's sandbox, and only those: not the ones already
// committing, nor those of another sandbox or of a namesake sandbox in
// another namespace.
func TestWaitingSnapshots(t *testing.T) {
	snap := func(ns, name, sb string, phase v1alpha1.SandboxSnapshotPhase) *v1alpha1.SandboxSnapshot {
		return &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: sb}, Status: v1alpha1.SandboxSnapshotStatus{Phase: phase}}
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{sandboxIndex: indexBySandbox})
	for _, s := range []*v1alpha1.SandboxSnapshot{
		snap("ns", "waits", "sb", v1alpha1.PhasePending),
		snap("ns", "waits-too", "sb", v1alpha1.PhasePending),
		snap("ns", "commits", "sb", v1alpha1.PhaseCommitting),
		snap("ns", "other-sandbox", "sb2", v1alpha1.PhasePending),
		snap("ns2", "other-namespace", "sb", v1alpha1.PhasePending),
	} {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	tr := &pipelinev1.TaskRun{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		sandbox.SnapshotNamespaceLabel: "ns", sandbox.SandboxNameLabel: "sb"}}}
	var got []string
	for _, s := range waitingSnapshots(idx, tr) {
		got = append(got, s.Name)
	}
	slices.Sort(got)
	if want := []string{"waits", "waits-too"}; !slices.Equal(got, want) {
		t.Errorf("waitingSnapshots = %v, want %v", got, want)
	}
}

// TestLogConfigNamesTheConfigMapVersion: each config-snapshot loaded is
// logged with the resourceVersion of the ConfigMap it came from, valid or
// not, so that a reader (or a test that changed it) can tell which version
// the controller runs with.
func TestLogConfigNamesTheConfigMapVersion(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	log := logConfig(zap.New(core).Sugar())
	for _, data := range []map[string]string{
		{config.RegistryKey: "registry.example/snapshots"},
		{config.MaxLayersKey: "none"},
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: config.SnapshotConfigName, ResourceVersion: "4711"}, Data: data}
		s, _ := config.NewSnapshotFromConfigMap(cm)
		log(config.SnapshotConfigName, s)
	}
	entries := logs.TakeAll()
	if len(entries) != 2 {
		t.Fatalf("%d log entries, want 2", len(entries))
	}
	for _, e := range entries {
		if got := e.ContextMap()["resourceVersion"]; got != "4711" {
			t.Errorf("%q logged resourceVersion %v, want 4711", e.Message, got)
		}
	}
}
