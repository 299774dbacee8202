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

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelineinformers "github.com/tektoncd/pipeline/pkg/client/informers/externalversions"
	pipelineclient "github.com/tektoncd/pipeline/pkg/client/injection/client"
	"go.opentelemetry.io/otel"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	filteredjobinformer "knative.dev/pkg/client/injection/kube/informers/batch/v1/job/filtered"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/leaderelection"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/client"
	batchsandboxinformer "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/batchsandbox"
	snapshotinformer "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/sandboxsnapshot"
	snapshotreconciler "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/reconciler/sandbox/v1alpha1/sandboxsnapshot"
	snapshotlisters "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/listers/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/podinformer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrysecret"
)

// FinalizerName is the finalizer holding a snapshot until its TaskRuns are gone.
const FinalizerName = sandbox.SnapshotFinalizer

// AgentName is the component named on the controller's events.
const AgentName = "sandbox-snapshot-controller"

// TaskRunSelector selects the TaskRuns this operator makes.
var TaskRunSelector = labels.SelectorFromSet(labels.Set{sandbox.ManagedByLabel: sandbox.ManagedByValue}).String()

// OpenSandboxJobSelector selects the Jobs of OpenSandbox's own SandboxSnapshot
// controller, which label each with its snapshot's name. Read only: a commit
// it started before the switch to this operator is waited for (switchover.go).
// The command passes it to knative's filtered informer factory
// (filteredinformerfactory.WithSelectors).
const OpenSandboxJobSelector = sandbox.SnapshotNameLabel

// NewController wires the reconciler to its informers and config.
func NewController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	logger := logging.FromContext(ctx)
	namespace := system.Namespace()
	// The commit gate is per process: buckets would split a pod's snapshots over replicas.
	if !sharedmain.IsHADisabled(ctx) {
		le, err := sharedmain.GetLeaderElectionConfig(ctx)
		if err != nil {
			logger.Fatalw("Failed to read the leader election configuration", zap.Error(err))
		}
		if le.Buckets != 1 {
			logger.Fatalf("ConfigMap %s/%s: key \"buckets\" is %d, but must be 1: the commits of one sandbox pod run one at a time only among the snapshots one replica leads",
				namespace, leaderelection.ConfigMapName(), le.Buckets)
		}
	}

	// Only our TaskRuns: a namespaced Role suffices, and memory stays bounded.
	taskRuns := pipelineinformers.NewSharedInformerFactoryWithOptions(pipelineclient.Get(ctx), controller.GetResyncPeriod(ctx),
		pipelineinformers.WithNamespace(namespace),
		pipelineinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = TaskRunSelector }),
	).Tekton().V1().TaskRuns()
	if err := taskRuns.Informer().AddIndexers(taskRunIndexers); err != nil {
		logger.Fatalw("Failed to index the TaskRuns", zap.Error(err))
	}
	snapshots := snapshotinformer.Get(ctx)
	if err := snapshots.Informer().AddIndexers(cache.Indexers{sandboxIndex: indexBySandbox}); err != nil {
		logger.Fatalw("Failed to index the snapshots by sandbox", zap.Error(err))
	}

	jobs := filteredjobinformer.Get(ctx, OpenSandboxJobSelector)

	r := &Reconciler{
		kubeClient:     kubeclient.Get(ctx),
		sandboxClient:  sandboxclient.Get(ctx),
		pipelineClient: pipelineclient.Get(ctx),
		taskRunIndex:   taskRuns.Informer().GetIndexer(),
		snapshotLister: snapshots.Lister(),
		sandboxLister:  batchsandboxinformer.Get(ctx).Lister(),
		podLister:      podinformer.Get(ctx).Lister(),
		jobLister:      jobs.Lister(),
		clock:          clock.RealClock{},
		namespace:      namespace,
		commits:        newCommitGate(),
		writes:         newOwnWrites(),
		registry:       registrysecret.Remote(kubeclient.Get(ctx), namespace),
		checks:         newImageChecks(),
	}

	configStore := config.NewStore(logger.Named("config-store"), logConfig(logger))
	configStore.WatchConfigs(cmw)

	// Other classes (OpenSandbox's own controller) are never enqueued. One
	// with our finalizer stays ours, so a class change strands nothing.
	ours := func(obj any) bool {
		o, ok := obj.(kmeta.Accessor)
		return ok && (slices.Contains(o.GetFinalizers(), FinalizerName) || configStore.Load().Snapshot.Handles(o.GetAnnotations()))
	}
	m, err := newMetrics(otel.GetMeterProvider().Meter(meterName), snapshots.Lister(), taskRuns.Lister().TaskRuns(namespace), ours)
	if err != nil {
		logger.Fatalw("Failed to set up the controller's metrics", zap.Error(err))
	}
	r.metrics = m
	impl := snapshotreconciler.NewImpl(withEventRecorder(ctx), r, func(*controller.Impl) controller.Options {
		return controller.Options{
			AgentName:         AgentName,
			ConfigStore:       configStore,
			FinalizerName:     FinalizerName,
			PromoteFilterFunc: ours,
			// ReconcileKind writes status itself; see there why.
			SkipStatusUpdates: true,
		}
	})
	impl.Reconciler = withSweep(impl.Reconciler, r)
	newSnapshots := newIntake(impl)
	filterPasses(impl, func(key string) bool {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			return false
		}
		s, err := snapshots.Lister().SandboxSnapshots(ns).Get(name)
		return err == nil && r.writes.stale(types.NamespacedName{Namespace: ns, Name: name}, s.ResourceVersion)
	}, newSnapshots)
	go newSnapshots.run(ctx)
	snapshots.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: ours,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if s, ok := obj.(*v1alpha1.SandboxSnapshot); ok && isNew(s) {
					newSnapshots.add(s)
					return
				}
				impl.Enqueue(obj)
			},
			UpdateFunc: controller.PassNew(impl.Enqueue),
			DeleteFunc: func(obj any) {
				if o, err := kmeta.DeletionHandlingAccessor(obj); err == nil {
					r.writes.forget(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
					r.checks.forget(o.GetUID())
				}
				impl.Enqueue(obj)
			},
		},
	})
	enqueueOwner := impl.EnqueueLabelOfNamespaceScopedResource(sandbox.SnapshotNamespaceLabel, sandbox.SnapshotNameLabel)
	wakeWaiters := func(obj any) {
		tr, ok := obj.(*pipelinev1.TaskRun)
		if !ok {
			return
		}
		for _, w := range waitingSnapshots(snapshots.Informer().GetIndexer(), tr) {
			impl.Enqueue(w)
		}
	}
	taskRuns.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueOwner,
		UpdateFunc: func(old, obj any) {
			enqueueOwner(obj)
			// A commit that ends frees its pod for the next snapshot.
			if wasDone, isDone := taskRunDone(old), taskRunDone(obj); isDone && !wasDone {
				wakeWaiters(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			enqueueOwner(obj)
			wakeWaiters(obj)
		},
	})

	// A commit Job of OpenSandbox's that ends (or goes) ends its snapshot's
	// wait; snapshots of another class are left alone here too.
	jobs.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: controller.FilterControllerGVK(v1alpha1.SchemeGroupVersion.WithKind("SandboxSnapshot")),
		Handler: controller.HandleAll(func(obj any) {
			if s := controllingSnapshot(snapshots.Lister(), obj); s != nil && ours(s) {
				impl.Enqueue(s)
			}
		}),
	})

	go taskRuns.Informer().Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), taskRuns.Informer().HasSynced) {
		logger.Fatal("Failed to sync the TaskRun informer")
	}
	return impl
}

// controllingSnapshot returns the cached snapshot that controls obj, a Job,
// or nil.
func controllingSnapshot(snapshots snapshotlisters.SandboxSnapshotLister, obj any) *v1alpha1.SandboxSnapshot {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	ref := metav1.GetControllerOf(o)
	if ref == nil {
		return nil
	}
	s, err := snapshots.SandboxSnapshots(o.GetNamespace()).Get(ref.Name)
	if err != nil || s.UID != ref.UID {
		return nil
	}
	return s
}

// taskRunDone reports whether obj is a finished TaskRun.
func taskRunDone(obj any) bool {
	tr, ok := obj.(*pipelinev1.TaskRun)
	return ok && tr.IsDone()
}

// sandboxIndex indexes snapshots by their sandbox: namespace/sandbox name.
const sandboxIndex = "sandbox"

// indexBySandbox is sandboxIndex's index function.
func indexBySandbox(obj any) ([]string, error) {
	s, ok := obj.(*v1alpha1.SandboxSnapshot)
	if !ok {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Spec.SandboxName}, nil
}

// waitingSnapshots lists the Pending snapshots of tr's sandbox.
func waitingSnapshots(snapshots cache.Indexer, tr *pipelinev1.TaskRun) []*v1alpha1.SandboxSnapshot {
	objs, _ := snapshots.ByIndex(sandboxIndex, tr.Labels[sandbox.SnapshotNamespaceLabel]+"/"+tr.Labels[sandbox.SandboxNameLabel])
	var waiting []*v1alpha1.SandboxSnapshot
	for _, o := range objs {
		if s, ok := o.(*v1alpha1.SandboxSnapshot); ok && s.Status.Phase == v1alpha1.PhasePending {
			waiting = append(waiting, s)
		}
	}
	return waiting
}

// logConfig logs each config-snapshot loaded, with its ConfigMap's
// resourceVersion, so errors show in the log too.
func logConfig(logger *zap.SugaredLogger) func(string, any) {
	return func(_ string, value any) {
		s, ok := value.(*config.Snapshot)
		switch {
		case !ok:
		case s.Err != nil:
			logger.Errorw("config-snapshot is invalid: new snapshots fail until it is fixed", "resourceVersion", s.ResourceVersion, zap.Error(s.Err))
		default:
			logger.Infow("Loaded config-snapshot", "resourceVersion", s.ResourceVersion, "registry", s.Registry, "pushSecret", s.PushSecret,
				"insecureRegistry", s.InsecureRegistry, "registryCAConfigMap", s.RegistryCAConfigMap, "commitTimeout", s.CommitTimeout.String(),
				"containerdSocket", s.ContainerdSocket, "overlayfsRoot", s.OverlayfsRoot, "taskName", s.TaskName, "taskBundle", s.TaskBundle, "defaultClass", s.DefaultClass,
				"priorityClass", s.PriorityClass, "maxLayers", s.MaxLayers, "maxPause", s.MaxPause.String(),
				"keepLocal", s.KeepLocal, "keepLocalMaxSize", s.KeepLocalMaxSize, "diskReserve", s.DiskReserve, "commitEphemeralStorage", s.CommitEphemeralStorage,
				"taskRunRetentionSucceeded", s.TaskRunRetentionSucceeded.String(), "taskRunRetentionFailed", s.TaskRunRetentionFailed.String(),
				"imageDeletionPolicy", s.ImageDeletionPolicy, "imageDeletionTimeout", s.ImageDeletionTimeout.String(),
				"imageCheckInterval", s.ImageCheckInterval.String(), "imageChecksPerMinute", s.ImageChecksPerMinute,
				"snapshotMode", s.SnapshotMode, "memoryFallback", s.MemoryFallback, "memoryRestoreBase", s.MemoryRestoreBase,
				"memoryAnonymousPull", s.MemoryAnonymousPull, "checkpointDir", s.CheckpointDir)
		}
	}
}
