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
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"
	_ "knative.dev/pkg/system/testing" // SYSTEM_NAMESPACE for the table tests

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/imageref"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrytest"
)

const (
	ns           = "team-a"
	registryHost = "registry.test/snapshots"
	repo         = registryHost + "/team-a/sb/app"
	tag          = "snap-gen3-sbuid"
	digest       = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	image        = repo + "@" + digest
	pinned       = repo + ":" + tag + "@" + digest
)

// now is the rows' clock.
var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// deleted is the deleted snapshot whose image the rows' record names.
func deleted() *v1alpha1.SandboxSnapshot {
	s := Snapshot(ns, "sb-pause", "sb")
	s.Status.MarkCommitting(metav1.NewTime(now), "sb-0", "node-1", []v1alpha1.ContainerSnapshot{{ContainerName: "app", ImageURI: repo + ":" + tag}},
		v1alpha1.TaskRunReference{}, metav1.NewTime(now))
	s.Status.MarkSucceeded(metav1.NewTime(now), []string{digest}, nil, v1alpha1.TaskRunReference{})
	return s
}

// recordOf is the deletion record of deleted()'s image, changed by opts.
func recordOf(opts ...func(*snapshotimage.Record)) *corev1.ConfigMap {
	cms, _, err := snapshotimage.MakeRecords(deleted(), system.Namespace(), snapshotimage.Ownership{Registry: registryHost})
	if err != nil || len(cms) != 1 {
		panic(fmt.Sprintf("records %v: %v", cms, err))
	}
	cm := cms[0]
	cm.UID = "record-uid"
	if len(opts) == 0 {
		return cm
	}
	rec, err := snapshotimage.ParseRecord(cm)
	if err != nil {
		panic(err)
	}
	for _, o := range opts {
		o(rec)
	}
	return rec.Apply(cm)
}

func waitingFor(who string) func(*snapshotimage.Record) {
	return func(r *snapshotimage.Record) { r.WaitingFor = who }
}

func failing(since time.Time, last string) func(*snapshotimage.Record) {
	return func(r *snapshotimage.Record) { r.FailingSince, r.LastError = since, last }
}

func podRunning(name, image string) *corev1.Pod {
	p := Pod(ns, name, []string{"app"}, WithRunningOn("node-1"))
	p.Spec.Containers[0].Image = image
	return p
}

func sandboxWithTemplate(name, image string) *v1alpha1.BatchSandbox {
	sb := BatchSandbox(ns, name, 2)
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
	return sb
}

// event is the event rows expect on the deleted snapshot.
func event(eventType, reason, format string, args ...any) string {
	return rtesting.Eventf(eventType, reason, format, args...)
}

type registryKey struct{}

func withRegistry(f *registrytest.Fake, data ...map[string]string) context.Context {
	cfg := map[string]string{config.RegistryKey: registryHost}
	for _, d := range data {
		for k, v := range d {
			cfg[k] = v
		}
	}
	c, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: cfg})
	ctx := context.WithValue(context.Background(), metricReaderKey{}, sdkmetric.Reader(sdkmetric.NewManualReader()))
	return config.ToContext(context.WithValue(ctx, registryKey{}, f), &config.Config{Snapshot: c})
}

// metricReaderKey carries, in a row's context, the reader the row's
// reconciler records its metrics to.
type metricReaderKey struct{}

// wantLeftBehind checks that the row counted one image left behind, for
// cause, or none when cause is empty.
func wantLeftBehind(cause string) func(*testing.T, *rtesting.TableRow) {
	return func(t *testing.T, row *rtesting.TableRow) {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := row.Ctx.Value(metricReaderKey{}).(sdkmetric.Reader).Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "sandbox_snapshot_images_left_behind" {
					for _, dp := range sum.DataPoints {
						c, _ := dp.Attributes.Value(causeKey)
						got[c.AsString()] += dp.Value
					}
				}
			}
		}
		want := map[string]int64{}
		if cause != "" {
			want[cause] = 1
		}
		if !maps.Equal(got, want) {
			t.Errorf("images left behind counted by cause: %v, want %v", got, want)
		}
	}
}

// staticConfig hands every pass the row's config.
type staticConfig struct{ cfg *config.Config }

func (s staticConfig) ToContext(ctx context.Context) context.Context {
	return config.ToContext(ctx, s.cfg)
}

func newReconciler(ctx context.Context, ls *Listers) controller.Reconciler {
	f, _ := ctx.Value(registryKey{}).(*registrytest.Fake)
	if f == nil {
		f = &registrytest.Fake{}
	}
	reader, ok := ctx.Value(metricReaderKey{}).(sdkmetric.Reader)
	if !ok {
		reader = sdkmetric.NewManualReader()
	}
	leftBehind, err := newLeftBehind(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter(meterName))
	if err != nil {
		panic(err)
	}
	index := func(fn cache.IndexFunc) cache.Indexers { return cache.Indexers{imageref.RepositoryIndex: fn} }
	return &Reconciler{
		kubeClient: fakekubeclient.Get(ctx),
		records:    ls.GetConfigMapLister().ConfigMaps(system.Namespace()),
		refs: &imageref.Finder{
			Pods:      ls.Indexer(&corev1.Pod{}, index(imageref.PodRepositories)),
			Sandboxes: ls.Indexer(&v1alpha1.BatchSandbox{}, index(imageref.BatchSandboxRepositories)),
			Snapshots: ls.Indexer(&v1alpha1.SandboxSnapshot{}, index(imageref.SnapshotRepositories)),
		},
		registry:   f.For(),
		recorder:   controller.GetEventRecorder(ctx),
		config:     staticConfig{config.FromContext(ctx)},
		clock:      clocktesting.NewFakePassiveClock(now),
		namespace:  system.Namespace(),
		leftBehind: leftBehind,
	}
}

// holding is a registry holding the rows' image.
func holding() *registrytest.Fake {
	return &registrytest.Fake{Held: map[string]string{image: digest}}
}

func wantDeleted(f *registrytest.Fake, want ...string) func(*testing.T, *rtesting.TableRow) {
	return func(t *testing.T, _ *rtesting.TableRow) {
		if !slices.Equal(f.Deleted, want) {
			t.Errorf("deleted %v, want %v", f.Deleted, want)
		}
	}
}

func deleteRecord() clientgotesting.DeleteActionImpl {
	return clientgotesting.DeleteActionImpl{
		ActionImpl:    clientgotesting.ActionImpl{Namespace: system.Namespace(), Verb: "delete", Resource: corev1.SchemeGroupVersion.WithResource("configmaps")},
		Name:          recordOf().Name,
		DeleteOptions: metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("record-uid"))}},
	}
}

// refusing answers every deletion as a registry that does not delete does.
func refusing() error {
	rec := httptest.NewRecorder()
	rec.WriteHeader(http.StatusMethodNotAllowed)
	fmt.Fprint(rec, `{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}`)
	return transport.CheckError(rec.Result(), http.StatusAccepted)
}

func TestReconcile(t *testing.T) {
	key := system.Namespace() + "/" + recordOf().Name
	running := podRunning("sb-0", pinned)
	plain, alsoDeleted, down, refused, gaveUp, secret, restored := holding(), holding(), holding(), holding(), holding(), holding(), holding()
	checkpoint := repo + ":snap-2@sha256:" + strings.Repeat("2", 64)
	restored.Checkpoints = map[string][]string{image: {checkpoint}}
	unlisted := holding()
	unlisted.CheckpointsErr = refusing()
	down.Err = errors.New("503 Service Unavailable")
	refused.Err = refusing()
	gaveUp.Err = down.Err
	other := Snapshot(ns, "osb-snap-1", "sb")
	other.Status = deleted().Status
	// A record edited to name another namespace's image, which the
	// registry holds.
	otherTenants := registryHost + "/team-b/sb/app@" + digest
	edited := recordOf()
	edited.Data["image"] = registryHost + "/team-b/sb/app:" + tag + "@" + digest
	holdingOther := &registrytest.Fake{Held: map[string]string{otherTenants: digest}}
	notAnImage := recordOf()
	notAnImage.Data["image"] = registryHost + "/team-a/sb/app:" + tag
	_, notAnImageErr := imageref.Parse(notAnImage.Data["image"])

	table := rtesting.TableTest{{
		Name: "a record that is gone is done with",
		Key:  key,
	}, {
		Name:           "an image nothing refers to is deleted, and its record goes",
		Ctx:            withRegistry(plain),
		Objects:        []runtime.Object{recordOf(), podRunning("other", registryHost+"/team-a/sb-x/app@"+digest)},
		Key:            key,
		WantDeletes:    []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents:     []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, "Deleted %s from the registry", image)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantDeleted(plain, image), wantLeftBehind("")},
	}, {
		Name:        "a record edited to name an image outside its snapshot's sandbox's repository is refused with an event, the image stays, and the record goes",
		Ctx:         withRegistry(holdingOther),
		Objects:     []runtime.Object{edited},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents: []string{event(corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionRefused,
			"Image deletion record %s/%s: image %s is not the snapshot's to delete: repository %s/team-b/sb/app is not one of sandbox team-a/sb's, %s/team-a/sb/<container>; it is left in the registry",
			system.Namespace(), recordOf().Name, otherTenants, registryHost, registryHost)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantDeleted(holdingOther)},
	}, {
		Name:        "an image a running pod runs from waits, and the record says for whom",
		Ctx:         withRegistry(holding()),
		Objects:     []runtime.Object{recordOf(), running},
		Key:         key,
		WantErr:     true, // a requeue after Recheck, should the pod's end be missed
		WantUpdates: []clientgotesting.UpdateActionImpl{{Object: recordOf(waitingFor("pod team-a/sb-0"))}},
		WantEvents: []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionDeferred,
			"%s is deleted once nothing refers to it; now: pod team-a/sb-0", image)},
	}, {
		Name:    "a record already waiting for the same writes nothing and says nothing again",
		Ctx:     withRegistry(holding()),
		Objects: []runtime.Object{recordOf(waitingFor("pod team-a/sb-0")), running},
		Key:     key,
		WantErr: true,
	}, {
		Name: "a BatchSandbox template that names the image by tag, a pod that reports it as its image ID, and a snapshot that records it hold it",
		Ctx:  withRegistry(holding()),
		Objects: []runtime.Object{recordOf(), sandboxWithTemplate("sb", repo+":"+tag), other,
			func() *corev1.Pod {
				p := podRunning("resumed", "registry.test/elsewhere:1")
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ImageID: image}}
				return p
			}()},
		Key:         key,
		WantErr:     true,
		WantUpdates: []clientgotesting.UpdateActionImpl{{Object: recordOf(waitingFor("BatchSandbox team-a/sb, SandboxSnapshot team-a/osb-snap-1, pod team-a/resumed"))}},
		WantEvents: []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionDeferred,
			"%s is deleted once nothing refers to it; now: BatchSandbox team-a/sb, SandboxSnapshot team-a/osb-snap-1, pod team-a/resumed", image)},
	}, {
		Name:           "a snapshot being deleted under Delete too does not hold the image",
		Ctx:            withRegistry(alsoDeleted, map[string]string{config.ImageDeletionPolicyKey: "Delete"}),
		Objects:        []runtime.Object{recordOf(), func() *v1alpha1.SandboxSnapshot { s := other.DeepCopy(); WithDeletionTimestamp(s); return s }()},
		Key:            key,
		WantDeletes:    []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents:     []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, "Deleted %s from the registry", image)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantDeleted(alsoDeleted, image)},
	}, {
		Name:        "a snapshot of the sandbox that has not started its commit holds the image: its commit may push to the repository",
		Ctx:         withRegistry(holding()),
		Objects:     []runtime.Object{recordOf(), Snapshot(ns, "next-pause", "sb", WithPending)},
		Key:         key,
		WantErr:     true,
		WantUpdates: []clientgotesting.UpdateActionImpl{{Object: recordOf(waitingFor(`SandboxSnapshot team-a/next-pause (phase "Pending"), whose commit may push to ` + repo))}},
		WantEvents: []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionDeferred,
			`%s is deleted once nothing refers to it; now: SandboxSnapshot team-a/next-pause (phase "Pending"), whose commit may push to %s`, image, repo)},
	}, {
		Name:        "an image a memory snapshot's image restores from waits while the registry holds that image, which names it",
		Ctx:         withRegistry(restored),
		Objects:     []runtime.Object{recordOf()},
		Key:         key,
		WantErr:     true,
		WantUpdates: []clientgotesting.UpdateActionImpl{{Object: recordOf(waitingFor("memory snapshot image " + checkpoint + ", whose restore pulls it"))}},
		WantEvents: []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionDeferred,
			"%s is deleted once nothing refers to it; now: memory snapshot image %s, whose restore pulls it", image, checkpoint)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantDeleted(restored)},
	}, {
		Name:        "a registry that refuses to list the repository's tags leaves the image behind at once, saying why, and the record goes",
		Ctx:         withRegistry(unlisted),
		Objects:     []runtime.Object{recordOf()},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents: []string{event(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Cannot tell whether a memory snapshot's image restores from %s, which is left behind: %v", image, unlisted.CheckpointsErr)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantDeleted(unlisted), wantLeftBehind(causeRestoreUnknown)},
	}, {
		Name:        "a registry that refuses deletion leaves the image behind at once, saying so, and the record goes",
		Ctx:         withRegistry(refused),
		Objects:     []runtime.Object{recordOf()},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents: []string{event(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"The registry refuses to delete %s, which is left behind: %v", image, refused.Err)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantLeftBehind(causeRefused)},
	}, {
		Name:        "a registry error is recorded and retried with backoff",
		Ctx:         withRegistry(down),
		Objects:     []runtime.Object{recordOf()},
		Key:         key,
		WantErr:     true,
		WantUpdates: []clientgotesting.UpdateActionImpl{{Object: recordOf(failing(now, "503 Service Unavailable"))}},
	}, {
		Name:        "past image-deletion-timeout of registry errors the image is left behind, saying so, and the record goes",
		Ctx:         withRegistry(gaveUp),
		Objects:     []runtime.Object{recordOf(failing(now.Add(-time.Hour), "503 Service Unavailable"))},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents: []string{event(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Gave up deleting %s after 1h0m0s (config-snapshot image-deletion-timeout), which is left behind; last: 503 Service Unavailable", image)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantLeftBehind(causeTimedOut)},
	}, {
		Name:        "the controller deletes with the Secret of registry-secret, never the push Secret",
		Ctx:         withRegistry(secret, map[string]string{config.PushSecretKey: "push", config.RegistrySecretKey: "delete"}),
		Objects:     []runtime.Object{recordOf()},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents:  []string{event(corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, "Deleted %s from the registry", image)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, _ *rtesting.TableRow) {
			if !slices.Equal(secret.Secrets, []string{"delete"}) {
				t.Errorf("clients were asked for with Secrets %v, want [delete]", secret.Secrets)
			}
		}},
	}, {
		Name:        "a record whose image is no image reference leaves it behind, saying so, and the record goes",
		Ctx:         withRegistry(holding()),
		Objects:     []runtime.Object{notAnImage},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
		WantEvents: []string{event(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Cannot delete %s, which is not an image reference: %v", notAnImage.Data["image"], notAnImageErr)},
		PostConditions: []func(*testing.T, *rtesting.TableRow){wantLeftBehind(causeNotAnImage)},
	}, {
		Name: "a record that is not one is dropped",
		Ctx:  withRegistry(holding()),
		Objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: system.Namespace(), Name: recordOf().Name, UID: "record-uid",
			Labels: map[string]string{snapshotimage.RecordLabel: "true"}}}},
		Key:         key,
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteRecord()},
	}}
	table.Test(t, MakeFactory(newReconciler))
}
