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

package imagedeletion

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	batchsandboxinformer "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/batchsandbox"
	snapshotinformer "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/sandboxsnapshot"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/imageref"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/podinformer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrysecret"
)

// AgentName is the component named on the events of image deletions.
const AgentName = "sandbox-snapshot-controller"

// NewController wires the image deletion reconciler to its records and to
// what may refer to their images: pods of every namespace (only their
// images are kept in memory), BatchSandboxes and SandboxSnapshots. The end
// of a reference queues the records of its repositories.
func NewController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	logger := logging.FromContext(ctx)
	namespace := system.Namespace()
	kube := kubeclient.Get(ctx)
	resync := controller.GetResyncPeriod(ctx)

	records := kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync, kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = snapshotimage.RecordLabel + "=true" }),
	).Core().V1().ConfigMaps()
	pods := podinformer.Get(ctx)
	sandboxes := batchsandboxinformer.Get(ctx)
	snapshots := snapshotinformer.Get(ctx)
	for inf, index := range map[cache.SharedIndexInformer]cache.IndexFunc{
		records.Informer():   recordKeys,
		pods.Informer():      imageref.PodRepositories,
		sandboxes.Informer(): imageref.BatchSandboxRepositories,
		snapshots.Informer(): imageref.SnapshotRepositories,
	} {
		if err := inf.AddIndexers(cache.Indexers{imageref.RepositoryIndex: index}); err != nil {
			logger.Fatalw("Failed to index an informer by image repository", "error", err)
		}
	}

	configStore := config.NewStore(logger.Named("config-store"))
	configStore.WatchConfigs(cmw)
	leftBehind, err := newLeftBehind(otel.GetMeterProvider().Meter(meterName))
	if err != nil {
		logger.Fatalw("Failed to make the image deletion metrics", "error", err)
	}
	r := &Reconciler{
		kubeClient: kube,
		records:    records.Lister().ConfigMaps(namespace),
		refs: &imageref.Finder{
			Pods:      pods.Informer().GetIndexer(),
			Sandboxes: sandboxes.Informer().GetIndexer(),
			Snapshots: snapshots.Informer().GetIndexer(),
		},
		registry:   registrysecret.Remote(kube, namespace),
		recorder:   eventRecorder(ctx),
		config:     configStore,
		clock:      clock.RealClock{},
		namespace:  namespace,
		leftBehind: leftBehind,
	}
	impl := controller.NewContext(ctx, r, controller.ControllerOptions{WorkQueueName: "ImageDeletions", Logger: logger})
	r.LeaderAwareFuncs = reconciler.LeaderAwareFuncs{
		PromoteFunc: func(bkt reconciler.Bucket, enq func(reconciler.Bucket, types.NamespacedName)) error {
			all, err := records.Lister().ConfigMaps(namespace).List(labels.Everything())
			for _, cm := range all {
				enq(bkt, types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name})
			}
			return err
		},
	}

	records.Informer().AddEventHandler(controller.HandleAll(impl.Enqueue))
	// enqueue queues the records of the repositories and sandbox keys an
	// object named.
	enqueue := func(keys []string) {
		for _, k := range keys {
			objs, _ := records.Informer().GetIndexer().ByIndex(imageref.RepositoryIndex, k)
			for _, o := range objs {
				impl.Enqueue(o)
			}
		}
	}
	onEnd := func(keysOf cache.IndexFunc, changed func(old, obj any) bool) cache.ResourceEventHandler {
		keys := func(obj any) []string {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			k, _ := keysOf(obj)
			return k
		}
		return cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) {
				if changed(old, obj) {
					enqueue(keys(old))
				}
			},
			DeleteFunc: func(obj any) { enqueue(keys(obj)) },
		}
	}
	keysChanged := func(keysOf cache.IndexFunc) func(old, obj any) bool {
		return func(old, obj any) bool {
			a, _ := keysOf(old)
			b, _ := keysOf(obj)
			return !slices.Equal(a, b)
		}
	}
	pods.Informer().AddEventHandler(onEnd(imageref.PodRepositories, keysChanged(imageref.PodRepositories)))
	sandboxes.Informer().AddEventHandler(onEnd(imageref.BatchSandboxRepositories, func(old, obj any) bool {
		a, b := old.(*v1alpha1.BatchSandbox), obj.(*v1alpha1.BatchSandbox)
		return a.Generation != b.Generation
	}))
	snapshots.Informer().AddEventHandler(onEnd(snapshotKeys, func(old, obj any) bool {
		a, b := old.(*v1alpha1.SandboxSnapshot), obj.(*v1alpha1.SandboxSnapshot)
		return a.Status.Phase != b.Status.Phase || a.DeletionTimestamp == nil && b.DeletionTimestamp != nil
	}))

	go records.Informer().Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), records.Informer().HasSynced) {
		logger.Fatal("Failed to sync the image deletion record informer")
	}
	return impl
}

// sandboxKey is the index key of the records of a sandbox's images.
func sandboxKey(namespace, sandbox string) string {
	return "sandbox:" + namespace + "/" + sandbox
}

// recordKeys indexes a record by its image's repository and its sandbox.
func recordKeys(obj any) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, nil
	}
	rec, err := snapshotimage.ParseRecord(cm)
	if err != nil {
		return nil, nil
	}
	keys := []string{sandboxKey(rec.Snapshot.Namespace, rec.Sandbox)}
	if img, err := imageref.Parse(rec.Image); err == nil {
		keys = append(keys, img.Repository())
	}
	return keys, nil
}

// snapshotKeys keys a snapshot by the repositories it names and its sandbox:
// the end of a commit that may push to a record's repository concerns the
// record, named or not yet.
func snapshotKeys(obj any) ([]string, error) {
	s, ok := obj.(*v1alpha1.SandboxSnapshot)
	if !ok {
		return nil, nil
	}
	keys, err := imageref.SnapshotRepositories(s)
	return append(keys, sandboxKey(s.Namespace, s.Spec.SandboxName)), err
}

// eventRecorder returns the recorder ctx carries (tests), or one that writes
// Events to the API server.
func eventRecorder(ctx context.Context) record.EventRecorder {
	if rec := controller.GetEventRecorder(ctx); rec != nil {
		return rec
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartLogging(logging.FromContext(ctx).Named("event-broadcaster").Infof)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclient.Get(ctx).CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: AgentName})
}
