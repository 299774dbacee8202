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
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
)

// chainsSuffixes are the tags Tekton Chains gives an image's signature and
// attestation: <repository>:sha256-<hex>.sig and .att.
var chainsSuffixes = []string{".sig", ".att"}

// imagesOf returns the manifests a snapshot recorded, as repository@digest.
// Containers without a digest pushed nothing that the snapshot knows of.
func imagesOf(s *v1alpha1.SandboxSnapshot, opts []name.Option) ([]name.Digest, error) {
	var out []name.Digest
	for _, c := range s.Status.Containers {
		if c.ImageDigest == "" {
			continue
		}
		tag, err := name.ParseReference(c.ImageURI, opts...)
		if err != nil {
			return nil, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s].imageUri %q: %w", s.Namespace, s.Name, c.ContainerName, c.ImageURI, err)
		}
		d, err := name.NewDigest(tag.Context().Name()+"@"+c.ImageDigest, opts...)
		if err != nil {
			return nil, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s].imageDigest %q: %w", s.Namespace, s.Name, c.ContainerName, c.ImageDigest, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// deleteImages deletes, under the Delete policy, the manifests a deleted
// snapshot recorded. It keeps a manifest that another snapshot records (and
// will not delete itself), waits while another snapshot of the same sandbox
// or repositories is not terminal (its commit may push the same digest), and
// retries registry errors with the work queue's backoff. Past
// image-deletion-timeout it gives up, naming what it left behind, so that a
// registry that refuses deletes never keeps a snapshot from going.
func (r *Reconciler) deleteImages(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	cfg := config.FromContext(ctx).Snapshot
	recorder := controller.GetEventRecorder(ctx)
	policy, err := cfg.ImageDeletionPolicyOf(s.Namespace, s.Name, s.Annotations)
	if err != nil {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "%v; the images are retained", err)
		return nil
	}
	if policy != config.ImageDeletionDelete {
		return nil
	}
	opts := nameOptions(cfg)
	images, err := imagesOf(s, opts)
	if err != nil {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "%v; the images are retained", err)
		return nil
	}
	if len(images) == 0 {
		return nil
	}
	giveUp := r.clock.Since(s.DeletionTimestamp.Time) >= cfg.ImageDeletionTimeout

	kept, committing := r.sharedImages(s, images, opts, cfg)
	var remove []name.Digest
	for _, d := range images {
		if !slices.Contains(kept, d.String()) {
			remove = append(remove, d)
		}
	}
	if len(remove) > 0 && committing != "" {
		return r.imageDeletionPending(ctx, s, remove, giveUp, true, "waiting for %s to finish: its commit may push the same manifests", committing)
	}

	var failures []string
	var left []name.Digest
	reg, err := r.registry(ctx, cfg)
	if err != nil {
		failures, left = append(failures, err.Error()), remove
	} else {
		for _, d := range remove {
			if err := r.deleteImage(ctx, reg, d); err != nil {
				failures = append(failures, err.Error())
				left = append(left, d)
			}
		}
	}
	if len(failures) > 0 {
		return r.imageDeletionPending(ctx, s, left, giveUp, false, "deleting %d of %d manifest(s) failed: %s",
			len(left), len(remove), strings.Join(failures, "; "))
	}
	message := fmt.Sprintf("Deleted %d manifest(s) from the registry: %s", len(remove), digestList(remove))
	if len(kept) > 0 {
		message += fmt.Sprintf("; kept %s, which other SandboxSnapshots record", strings.Join(kept, ", "))
	}
	recorder.Event(s, corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, message)
	return nil
}

// deleteImage deletes one manifest and, when Tekton Chains left them, its
// signature and attestation.
func (r *Reconciler) deleteImage(ctx context.Context, reg imageRegistry, d name.Digest) error {
	for _, suffix := range chainsSuffixes {
		tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + suffix)
		digest, err := reg.Digest(ctx, tag)
		if err != nil {
			return err
		}
		if digest == "" {
			continue
		}
		if err := reg.Delete(ctx, d.Context().Digest(digest)); err != nil {
			return err
		}
	}
	return reg.Delete(ctx, d)
}

// imageDeletionPending reports why images are not deleted yet and tries
// again: a commit in flight is waited for (ImageDeletionWaiting), a failure
// retried with the work queue's backoff (ImageDeletionFailed). Past the
// timeout it gives up with a warning naming what is left.
func (r *Reconciler) imageDeletionPending(ctx context.Context, s *v1alpha1.SandboxSnapshot, left []name.Digest, giveUp, waiting bool, format string, args ...any) pkgreconciler.Event {
	cfg := config.FromContext(ctx).Snapshot
	why := fmt.Sprintf(format, args...)
	recorder := controller.GetEventRecorder(ctx)
	if giveUp {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Gave up deleting the images of SandboxSnapshot %s/%s after %v (config-snapshot %s); left in the registry: %s; last: %s",
			s.Namespace, s.Name, cfg.ImageDeletionTimeout, config.ImageDeletionTimeoutKey, digestList(left), why)
		return nil
	}
	before := s.Status.DeepCopy()
	s.Status.MarkImageDeletion(digestStrings(left), "%s", why)
	if !equality.Semantic.DeepEqual(before, &s.Status) {
		rv := s.ResourceVersion
		if _, err := r.updateStatus(ctx, s, before); err != nil {
			return err
		}
		if s.ResourceVersion != rv {
			// Under OpenSandbox's CRD, which prunes status.imageDeletion,
			// the write changes nothing and the copy stays current.
			r.writes.replaced(types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, rv)
		}
	}
	message := fmt.Sprintf("Images of SandboxSnapshot %s/%s not deleted yet (%s): %s", s.Namespace, s.Name, digestList(left), why)
	if waiting {
		recorder.Event(s, corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionWaiting, message)
		return controller.NewRequeueAfter(cleanupWait)
	}
	// A wrapped Warning event: it is recorded, keeps the finalizer, and
	// requeues the snapshot with the work queue's backoff.
	return fmt.Errorf("%w", pkgreconciler.NewEvent(corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionFailed, "%s", message))
}

// sharedImages returns the images of s that other snapshots record and keep,
// and names a non-terminal snapshot whose commit could push to the same
// repositories ("" when there is none).
func (r *Reconciler) sharedImages(s *v1alpha1.SandboxSnapshot, images []name.Digest, opts []name.Option, cfg *config.Snapshot) (kept []string, committing string) {
	repos := map[string]bool{}
	for _, d := range images {
		repos[d.Context().Name()] = true
	}
	all, err := r.snapshotLister.List(labels.Everything())
	if err != nil {
		return nil, ""
	}
	for _, o := range all {
		if o.UID == s.UID {
			continue
		}
		theirs, _ := imagesOf(o, opts)
		if !o.Status.IsTerminal() {
			if mayPushTo(o, repos, opts, cfg) {
				committing = fmt.Sprintf("SandboxSnapshot %s/%s (phase %q) of sandbox %s", o.Namespace, o.Name, o.Status.Phase, o.Spec.SandboxName)
			}
			continue
		}
		if o.DeletionTimestamp != nil {
			// Being deleted too: it keeps its images only under Retain.
			if p, err := cfg.ImageDeletionPolicyOf(o.Namespace, o.Name, o.Annotations); err == nil && p == config.ImageDeletionDelete {
				continue
			}
		}
		for _, t := range theirs {
			for _, d := range images {
				if t.String() == d.String() && !slices.Contains(kept, d.String()) {
					kept = append(kept, d.String())
				}
			}
		}
	}
	return kept, committing
}

// mayPushTo reports whether the commit of o, a snapshot not terminal yet,
// may push to one of repos: its containers name one, or, before they are
// named, its sandbox's images under the configured registry would.
func mayPushTo(o *v1alpha1.SandboxSnapshot, repos map[string]bool, opts []name.Option, cfg *config.Snapshot) bool {
	if len(o.Status.Containers) == 0 {
		// Every repository of o's sandbox, and no other sandbox's, starts
		// with the probe's less its last path component.
		const probe = "c"
		r, err := name.NewRepository(resources.ImageRepository(cfg.Registry, o.Namespace, o.Spec.SandboxName, probe), opts...)
		if err != nil {
			return false
		}
		prefix := strings.TrimSuffix(r.Name(), probe)
		for repo := range repos {
			if strings.HasPrefix(repo, prefix) {
				return true
			}
		}
		return false
	}
	for _, c := range o.Status.Containers {
		if ref, err := name.ParseReference(c.ImageURI, opts...); err == nil && repos[ref.Context().Name()] {
			return true
		}
	}
	return false
}

func digestStrings(ds []name.Digest) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}

func digestList(ds []name.Digest) string {
	if len(ds) == 0 {
		return "none"
	}
	return strings.Join(digestStrings(ds), ", ")
}
