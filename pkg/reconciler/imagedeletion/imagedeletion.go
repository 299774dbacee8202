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

// Package imagedeletion deletes the images of deleted snapshots under the
// Delete image deletion policy, once nothing in the cluster refers to them.
//
// A snapshot's finalizer only records its images (snapshotimage.MakeRecords:
// those snapshotimage.Ownership says are its own) and goes: OpenSandbox deletes
// <sandbox>-pause right after a resume, while the resumed pod and the
// BatchSandbox's template still name its image, and its next pause of the
// sandbox waits for that name to be free. This reconciler holds each record
// until no pod, BatchSandbox template or other snapshot refers to the image,
// and no memory snapshot's image in the registry restores from it, then
// deletes the manifest.
package imagedeletion

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/imageref"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// Recheck is how often a record whose image something refers to is looked
// at again, should the event of the reference's end be lost.
const Recheck = 10 * time.Minute

// Reconciler deletes the images that records name.
type Reconciler struct {
	reconciler.LeaderAwareFuncs

	kubeClient kubernetes.Interface
	records    corev1listers.ConfigMapNamespaceLister
	refs       *imageref.Finder
	registry   registry.For
	recorder   record.EventRecorder
	config     interface {
		ToContext(context.Context) context.Context
	}
	clock     clock.PassiveClock
	namespace string
	// leftBehind counts the images given up on (newLeftBehind).
	leftBehind metric.Int64Counter
}

var _ controller.Reconciler = (*Reconciler)(nil)

// Reconcile implements controller.Reconciler for the record of key.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil || ns != r.namespace || !r.IsLeaderFor(types.NamespacedName{Namespace: ns, Name: name}) {
		return nil
	}
	cm, err := r.records.Get(name)
	if apierrs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	rec, err := snapshotimage.ParseRecord(cm)
	if err != nil {
		logging.FromContext(ctx).Errorw("Dropping a broken image deletion record", "error", err)
		return r.drop(ctx, cm)
	}
	ctx = r.config.ToContext(ctx)
	cfg := config.FromContext(ctx).Snapshot
	opts := registry.NameOptions(cfg.InsecureRegistry)
	img, err := imageref.Parse(rec.Image, opts...)
	if err != nil {
		r.event(rec, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "Cannot delete %s, which is not an image reference: %v", rec.Image, err)
		r.leftBehind.Add(ctx, 1, metric.WithAttributes(causeKey.String(causeNotAnImage)))
		return r.drop(ctx, cm)
	}
	// MakeRecords records only a snapshot's own images; checked again here,
	// a record edited since (or made before that check) cannot name another
	// sandbox's. The commit TaskRun, gone by now, no longer vouches for the
	// digest: the repository alone is checked.
	if err := (snapshotimage.Ownership{Registry: cfg.Registry}).Check(img.Digest, rec.Snapshot.Namespace, rec.Sandbox, opts...); err != nil {
		r.event(rec, corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionRefused,
			"Image deletion record %s/%s: image %s is not the snapshot's to delete: %v; it is left in the registry", cm.Namespace, cm.Name, img, err)
		return r.drop(ctx, cm)
	}

	refs, err := r.refs.Referrers(img, rec.SandboxKey(), func(s *v1alpha1.SandboxSnapshot) bool { return retains(cfg, s) })
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		return r.wait(ctx, cm, rec, img, refs)
	}

	client, err := r.registry(ctx, registry.Access{Secret: cfg.ControllerSecret(), CAConfigMap: cfg.RegistryCAConfigMap})
	if err == nil {
		// A memory snapshot's image restores only after pulling its base:
		// the base stays while such an image does.
		var restoring []string
		restoring, err = client.CheckpointsOf(ctx, img.Digest)
		switch {
		case err == nil && len(restoring) > 0:
			for i, ref := range restoring {
				restoring[i] = "memory snapshot image " + ref + ", whose restore pulls it"
			}
			return r.wait(ctx, cm, rec, img, restoring)
		case registry.IsPermanent(err):
			r.event(rec, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
				"Cannot tell whether a memory snapshot's image restores from %s, which is left behind: %v", img, err)
			r.leftBehind.Add(ctx, 1, metric.WithAttributes(causeKey.String(causeRestoreUnknown)))
			return r.drop(ctx, cm)
		}
	}
	if err == nil {
		err = registry.DeleteImage(ctx, client, img.Digest)
	}
	now := r.clock.Now()
	switch {
	case err == nil:
		r.event(rec, corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, "Deleted %s from the registry", img)
		return r.drop(ctx, cm)
	case registry.IsPermanent(err):
		r.event(rec, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"The registry refuses to delete %s, which is left behind: %v", img, err)
		r.leftBehind.Add(ctx, 1, metric.WithAttributes(causeKey.String(causeRefused)))
		return r.drop(ctx, cm)
	case !rec.FailingSince.IsZero() && now.Sub(rec.FailingSince) >= cfg.ImageDeletionTimeout:
		r.event(rec, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Gave up deleting %s after %v (config-snapshot %s), which is left behind; last: %v",
			img, cfg.ImageDeletionTimeout, config.ImageDeletionTimeoutKey, err)
		r.leftBehind.Add(ctx, 1, metric.WithAttributes(causeKey.String(causeTimedOut)))
		return r.drop(ctx, cm)
	}
	if rec.FailingSince.IsZero() {
		rec.FailingSince = now
	}
	rec.WaitingFor, rec.LastError = "", err.Error()
	if uerr := r.update(ctx, cm, rec); uerr != nil {
		return uerr
	}
	// Retried with the work queue's backoff.
	return fmt.Errorf("deleting %s: %w", img, err)
}

// wait records what img waits for, refs, says so in an event when it starts
// waiting, and looks again after Recheck.
func (r *Reconciler) wait(ctx context.Context, cm *corev1.ConfigMap, rec *snapshotimage.Record, img imageref.Image, refs []string) error {
	waiting := strings.Join(refs, ", ")
	if rec.WaitingFor == "" {
		r.event(rec, corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionDeferred,
			"%s is deleted once nothing refers to it; now: %s", img, waiting)
	}
	rec.WaitingFor, rec.FailingSince, rec.LastError = waiting, time.Time{}, ""
	if err := r.update(ctx, cm, rec); err != nil {
		return err
	}
	return controller.NewRequeueAfter(Recheck)
}

// retains reports whether snapshot s keeps the images it records: it is not
// being deleted under the Delete policy, which deletes them with it.
func retains(cfg *config.Snapshot, s *v1alpha1.SandboxSnapshot) bool {
	if s.DeletionTimestamp == nil {
		return true
	}
	p, err := cfg.ImageDeletionPolicyOf(s.Namespace, s.Name, s.Annotations)
	return err != nil || p != config.ImageDeletionDelete
}

// event reports on the snapshot that recorded the image, which is gone or
// going.
func (r *Reconciler) event(rec *snapshotimage.Record, eventType, reason, format string, args ...any) {
	s := &v1alpha1.SandboxSnapshot{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "SandboxSnapshot"},
		ObjectMeta: metav1.ObjectMeta{Namespace: rec.Snapshot.Namespace, Name: rec.Snapshot.Name, UID: rec.UID},
	}
	r.recorder.Eventf(s, eventType, reason, format, args...)
}

// update writes what rec reports into the record, when it changed.
func (r *Reconciler) update(ctx context.Context, cm *corev1.ConfigMap, rec *snapshotimage.Record) error {
	want := rec.Apply(cm)
	if maps.Equal(cm.Data, want.Data) {
		return nil
	}
	if _, err := r.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating image deletion record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// drop deletes a record that is done with.
func (r *Reconciler) drop(ctx context.Context, cm *corev1.ConfigMap) error {
	err := r.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &cm.UID},
	})
	if err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("deleting image deletion record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
