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
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
)

// fakeRegistry is the table tests' registry: it holds manifests by
// reference, records what it is asked, and fails as told.
type fakeRegistry struct {
	mu       sync.Mutex
	held     map[string]string // reference (repo@digest or repo:tag) -> digest
	deleted  []string
	lookedUp []string
	err      error // every call fails with it
	clientEr error // getting the client fails with it
}

type fakeRegistryKey struct{}

// withRegistry attaches a fake registry to a row's context.
func withRegistry(ctx context.Context, f *fakeRegistry) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, fakeRegistryKey{}, f)
}

// registryOf returns the registryFor of the row's fake registry, or of one
// that holds nothing.
func registryOf(ctx context.Context) registryFor {
	f, ok := ctx.Value(fakeRegistryKey{}).(*fakeRegistry)
	if !ok {
		f = &fakeRegistry{}
	}
	return func(context.Context, *config.Snapshot) (imageRegistry, error) {
		if f.clientEr != nil {
			return nil, f.clientEr
		}
		return f, nil
	}
}

func (f *fakeRegistry) Digest(_ context.Context, ref name.Reference) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookedUp = append(f.lookedUp, ref.String())
	if f.err != nil {
		return "", f.err
	}
	return f.held[ref.String()], nil
}

func (f *fakeRegistry) Delete(_ context.Context, ref name.Digest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.deleted = append(f.deleted, ref.String())
	delete(f.held, ref.String())
	return nil
}

type imageChecksKey struct{}

// withImageChecks gives the row's reconciler the state of the image check.
func withImageChecks(ctx context.Context, c *imageChecks) context.Context {
	return context.WithValue(ctx, imageChecksKey{}, c)
}

// imageChecksOf returns the row's image check state, or a new one.
func imageChecksOf(ctx context.Context) *imageChecks {
	if c, ok := ctx.Value(imageChecksKey{}).(*imageChecks); ok {
		return c
	}
	return newImageChecks()
}

// wantDeleted checks the manifests the row deleted, in order.
func wantDeleted(f *fakeRegistry, want ...string) func(*testing.T, *rtesting.TableRow) {
	return func(t *testing.T, _ *rtesting.TableRow) {
		if !slices.Equal(f.deleted, want) {
			t.Errorf("deleted %v, want %v", f.deleted, want)
		}
	}
}

func TestImageDeletion(t *testing.T) {
	f := newRetentionFixture()
	succeed := WithSucceeded(412, digestA, digestB)
	imageA := registry + "/team-a/sb/app@" + digestA
	imageB := registry + "/team-a/sb/sidecar@" + digestB
	deletePolicy := func(ctx context.Context) context.Context {
		return config.ToContext(ctx, &config.Config{Snapshot: mustConfig(map[string]string{
			config.RegistryKey: registry, config.ImageDeletionPolicyKey: "Delete", config.TaskRunRetentionSucceededKey: "-1"})})
	}
	deleting := f.snap(f.committing, succeed, WithDeletionTimestamp)
	deletingWith := func(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return f.snap(append([]SnapshotOption{f.committing, succeed, WithDeletionTimestamp}, opts...)...)
	}
	// another is a Succeed snapshot of another sandbox recording the given digest as its app image.
	another := func(sandboxName, digest string, opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		containers := []v1alpha1.ContainerSnapshot{{ContainerName: "app", ImageURI: registry + "/team-a/sb/app:snap-other"}}
		return Snapshot(ns, "other", sandboxName, append([]SnapshotOption{
			WithCommitting("other-0", node, containers, f.trNamespace, "other-commit"), WithSucceeded(1, digest)}, opts...)...)
	}
	deletedEvent := func(message string) string {
		return rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonImagesDeleted, "%s", message)
	}
	pendingEvent := func(left, why string) string {
		return rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionFailed,
			"Images of SandboxSnapshot %s/%s not deleted yet (%s): %s", ns, snapName, left, why)
	}
	waitingEvent := func(left, why string) string {
		return rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonImageDeletionWaiting,
			"Images of SandboxSnapshot %s/%s not deleted yet (%s): %s", ns, snapName, left, why)
	}
	registryDown := errors.New("503 Service Unavailable")
	withPending := func(why string, left ...string) SnapshotOption {
		return func(s *v1alpha1.SandboxSnapshot) { s.Status.MarkImageDeletion(left, "%s", why) }
	}

	// reg is a registry holding the snapshot's two manifests; row names it
	// for the reader.
	reg := func(row string) *fakeRegistry {
		return &fakeRegistry{held: map[string]string{imageA: digestA, imageB: digestB}}
	}
	rows := rtesting.TableTest{}
	add := func(row rtesting.TableRow, r *fakeRegistry, want ...string) {
		row.Ctx = withRegistry(row.Ctx, r)
		row.SkipNamespaceValidation = true
		row.PostConditions = append(row.PostConditions, wantDeleted(r, want...))
		rows = append(rows, row)
	}

	add(rtesting.TableRow{
		Name:        "under the default Retain policy, deleting a snapshot leaves its images in the registry",
		Objects:     []runtime.Object{deleting},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, reg("retain"))
	add(rtesting.TableRow{
		Name:        "under the Delete policy, deleting a snapshot deletes its manifests by digest",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("delete"), imageA, imageB)
	add(rtesting.TableRow{
		Name:        "the annotation asks for Delete under the default Retain policy",
		Objects:     []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Delete"))},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("annotation delete"), imageA, imageB)
	add(rtesting.TableRow{
		Name:        "the annotation asks for Retain under the Delete policy",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Retain"))},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, reg("annotation retain"))
	add(rtesting.TableRow{
		Name:        "an invalid annotation retains the images and says so, naming the snapshot and the annotation",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Purge"))},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			`SandboxSnapshot %s/%s: annotation %s: "Purge" is neither "Retain" nor "Delete"; the images are retained`, ns, snapName, sandbox.ImageDeletionPolicyAnnotation)},
	}, reg("invalid"))
	add(rtesting.TableRow{
		Name:        "a manifest another snapshot records is kept; the rest is deleted",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting, another("other-sb", digestA)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 1 manifest(s) from the registry: " + imageB + "; kept " + imageA + ", which other SandboxSnapshots record")},
	}, reg("shared"), imageB)
	add(rtesting.TableRow{
		Name:        "a manifest another snapshot records is kept when that snapshot is being deleted under Retain",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting, another("other-sb", digestA, WithDeletionTimestamp, WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Retain"))},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 1 manifest(s) from the registry: " + imageB + "; kept " + imageA + ", which other SandboxSnapshots record")},
	}, reg("shared retain"), imageB)
	add(rtesting.TableRow{
		Name:        "a manifest another snapshot records goes when that snapshot is being deleted under Delete too",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting, another("other-sb", digestA, WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("shared delete"), imageA, imageB)
	waitMessage := `waiting for SandboxSnapshot team-a/next (phase "Committing") of sandbox sb to finish: its commit may push the same manifests`
	add(rtesting.TableRow{
		Name: "while another snapshot of the same sandbox commits, nothing is deleted and the finalizer stays",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{deleting,
			Snapshot(ns, "next", sbName, WithCommitting("sb-0", node, committed, f.trNamespace, "next-commit"))},
		Key:               key,
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: deletingWith(withPending(waitMessage, imageA, imageB))}},
		WantEvents:        []string{waitingEvent(imageA+", "+imageB, waitMessage)},
	}, reg("in flight"))
	pendingWhy := `waiting for SandboxSnapshot team-a/next (phase "Pending") of sandbox sb to finish: its commit may push the same manifests`
	add(rtesting.TableRow{
		Name: "a Pending snapshot of the same sandbox holds the deletion too: its images are not named yet",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{deleting,
			Snapshot(ns, "next", sbName, WithPending)},
		Key:               key,
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: deletingWith(withPending(pendingWhy, imageA, imageB))}},
		WantEvents:        []string{waitingEvent(imageA+", "+imageB, pendingWhy)},
	}, reg("pending"))
	add(rtesting.TableRow{
		Name: "a Pending snapshot of a sandbox of the same name in another namespace, or of sandbox sb-x, holds nothing",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{deleting,
			Snapshot("team-b", "next", sbName, WithPending), Snapshot(ns, "next-x", "sb-x", WithPending)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("pending elsewhere"), imageA, imageB)
	add(rtesting.TableRow{
		Name: "a commit of a sandbox of the same name into another registry holds nothing",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{deleting, Snapshot("team-b", "next", sbName, WithCommitting("sb-0", node,
			[]v1alpha1.ContainerSnapshot{{ContainerName: "app", ImageURI: "elsewhere.test/snapshots/team-a/sb/app:" + tag}}, f.trNamespace, "next-commit"))},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("other registry"), imageA, imageB)
	add(rtesting.TableRow{
		Name: "with every manifest kept for another snapshot there is nothing to wait for",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{f.snap(f.committing, func(s *v1alpha1.SandboxSnapshot) {
			s.Status.Containers = s.Status.Containers[:1]
		}, WithSucceeded(412, digestA), WithDeletionTimestamp), another("other-sb", digestA), Snapshot(ns, "next", sbName, WithPending)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 0 manifest(s) from the registry: none; kept " + imageA + ", which other SandboxSnapshots record")},
	}, reg("all kept"))
	add(rtesting.TableRow{
		Name:        "a commit of another sandbox holds nothing",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting, Snapshot(ns, "next", "other-sb", WithPending)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, reg("other sandbox"), imageA, imageB)
	failing := reg("registry down")
	failing.err = registryDown
	downWhy := "deleting 2 of 2 manifest(s) failed: 503 Service Unavailable; 503 Service Unavailable"
	add(rtesting.TableRow{
		Name:              "a registry error is reported on the snapshot and retried with backoff, keeping the finalizer",
		Ctx:               deletePolicy(context.Background()),
		Objects:           []runtime.Object{deleting},
		Key:               key,
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: deletingWith(withPending(downWhy, imageA, imageB))}},
		WantEvents:        []string{pendingEvent(imageA+", "+imageB, downWhy)},
	}, failing)
	noSecret := reg("no secret")
	noSecret.clientEr = errors.New(`getting push Secret sandbox-snapshot-system/push: secrets "push" not found`)
	secretWhy := `deleting 2 of 2 manifest(s) failed: getting push Secret sandbox-snapshot-system/push: secrets "push" not found`
	add(rtesting.TableRow{
		Name:              "a push Secret that cannot be read is retried like a registry error",
		Ctx:               deletePolicy(context.Background()),
		Objects:           []runtime.Object{deleting},
		Key:               key,
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: deletingWith(withPending(secretWhy, imageA, imageB))}},
		WantEvents:        []string{pendingEvent(imageA+", "+imageB, secretWhy)},
	}, noSecret)
	gaveUp := reg("gave up")
	gaveUp.err = registryDown
	add(rtesting.TableRow{
		Name: "past image-deletion-timeout the finalizer comes off, with a warning naming what is left",
		Ctx:  deletePolicy(context.Background()),
		Objects: []runtime.Object{deletingWith(func(s *v1alpha1.SandboxSnapshot) {
			s.DeletionTimestamp = &metav1.Time{Time: Now.Add(-time.Hour)}
		})},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			"Gave up deleting the images of SandboxSnapshot %s/%s after 1h0m0s (config-snapshot image-deletion-timeout); left in the registry: %s, %s; last: %s",
			ns, snapName, imageA, imageB, downWhy)},
	}, gaveUp)
	signed := reg("signed")
	sigTag := registry + "/team-a/sb/app:sha256-" + digestA[len("sha256:"):] + ".sig"
	sigDigest := "sha256:" + "5151515151515151515151515151515151515151515151515151515151515151"
	signed.held[sigTag] = sigDigest
	add(rtesting.TableRow{
		Name:        "Tekton Chains' signature of a manifest goes before the manifest",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{deleting},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents:  []string{deletedEvent("Deleted 2 manifest(s) from the registry: " + imageA + ", " + imageB)},
	}, signed, registry+"/team-a/sb/app@"+sigDigest, imageA, imageB)
	add(rtesting.TableRow{
		Name:        "a Failed snapshot recorded no digests: nothing to delete",
		Ctx:         deletePolicy(context.Background()),
		Objects:     []runtime.Object{f.snap(f.committing, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, reg("failed"))
	rows = append(rows, rtesting.TableRow{
		Name:    "a new snapshot with an invalid image deletion policy annotation fails with InvalidSpec naming it",
		Objects: []runtime.Object{f.snap(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Never")), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: f.snap(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Never"),
			WithFailed(v1alpha1.ReasonInvalidSpec, `SandboxSnapshot team-a/snap: annotation sandbox.opensandbox.io/image-deletion-policy: "Never" is neither "Retain" nor "Delete"`))}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec,
			`SandboxSnapshot team-a/snap: annotation sandbox.opensandbox.io/image-deletion-policy: "Never" is neither "Retain" nor "Delete"`)},
	})

	rows.Test(t, MakeFactory(newReconciler))
}
