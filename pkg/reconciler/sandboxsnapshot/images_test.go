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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrytest"
)

// digestC is a manifest no commit of the rows pushed.
const digestC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

// naming edits status.containers[app] of a snapshot to name image (a
// tagged reference) pinned to digest, as anyone who may write the status can.
func naming(image, digest string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.Status.Containers = append([]v1alpha1.ContainerSnapshot(nil), s.Status.Containers...)
		s.Status.Containers[0].ImageURI, s.Status.Containers[0].ImageDigest = image+"@"+digest, digest
	}
}

type fakeRegistryKey struct{}

// withRegistry attaches a fake registry to a row's context.
func withRegistry(ctx context.Context, f *registrytest.Fake) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, fakeRegistryKey{}, f)
}

// registryOf returns the registry.For of the row's fake registry, or of one
// that holds nothing.
func registryOf(ctx context.Context) registry.For {
	f, ok := ctx.Value(fakeRegistryKey{}).(*registrytest.Fake)
	if !ok {
		f = &registrytest.Fake{}
	}
	return f.For()
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

func TestImageDeletion(t *testing.T) {
	f := newRetentionFixture()
	succeed := WithSucceeded(412, digestA, digestB)
	deletePolicy := withConfig(map[string]string{
		config.RegistryKey: registryPrefix, config.ImageDeletionPolicyKey: "Delete", config.TaskRunRetentionSucceededKey: "-1"})
	deletingWith := func(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return f.snap(append([]SnapshotOption{f.committing, succeed, WithDeletionTimestamp}, opts...)...)
	}
	deleting := deletingWith()
	// records are the deletion records of the deleted snapshot's images.
	records := func(s *v1alpha1.SandboxSnapshot) []runtime.Object {
		cms, refused, err := snapshotimage.MakeRecords(s, f.trNamespace, snapshotimage.Ownership{Registry: registryPrefix})
		if err != nil || len(refused) > 0 {
			t.Fatal(err, refused)
		}
		out := make([]runtime.Object, len(cms))
		for i, cm := range cms {
			out[i] = cm
		}
		return out
	}
	// release is the TaskRun that gives back the images the commit kept.
	release := func(s *v1alpha1.SandboxSnapshot) runtime.Object {
		return resources.MakeReleaseTaskRun(s, defaultCfg, f.trNamespace)
	}
	withCreates := func(s *v1alpha1.SandboxSnapshot, more ...runtime.Object) []runtime.Object {
		return append([]runtime.Object{release(s)}, more...)
	}
	// sidecarOnly is the record of the one image of the edited snapshots
	// below that is theirs: the sidecar's.
	sidecarOnly := records(deleting)[1]
	// The commit TaskRun of deleting, which reported digestA and digestB.
	commit := f.succeededCommit(time.Minute)
	// Images anyone who may write the status could name in it: another
	// namespace's, and a manifest of the sandbox's own repository that its
	// commit did not push.
	otherTenants := registryPrefix + "/team-b/sb/app:" + tag
	notPushed := registryPrefix + "/team-a/sb/app:" + tag
	refused := func(image, why string) string {
		return rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionRefused,
			"SandboxSnapshot %s/%s: status.containers[app]: image %s is not the snapshot's to delete: %s; it is left in the registry",
			ns, snapName, image, why)
	}

	rows := rtesting.TableTest{{
		Name:                    "under the default Retain policy, deleting a snapshot leaves its images in the registry",
		Objects:                 []runtime.Object{deleting},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:                    "under the Delete policy, deleting a snapshot records each image for deletion once nothing refers to it, and goes",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deleting},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, records(deleting)...),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:                    "with its commit TaskRun still there, deleting a snapshot records each image the TaskRun reported pushing",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deleting, commit},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, records(deleting)...),
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName)},
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name: "an image of another namespace's repository, written into the status, is refused with an event and left in the registry; " +
			"with the TaskRun gone, the repository alone decides",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deletingWith(naming(otherTenants, digestA))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, sidecarOnly),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{refused(registryPrefix+"/team-b/sb/app@"+digestA,
			"repository "+registryPrefix+"/team-b/sb/app is not one of sandbox team-a/sb's, "+registryPrefix+"/team-a/sb/<container>")},
	}, {
		Name: "an image of the sandbox's own repository whose digest its commit TaskRun did not report, written into the status, " +
			"is refused with an event and left in the registry",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deletingWith(naming(notPushed, digestC)), commit},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, sidecarOnly),
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(f.trNamespace, f.trName)},
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{refused(registryPrefix+"/team-a/sb/app@"+digestC,
			"TaskRun "+f.trNamespace+"/"+f.trName+" did not report pushing it")},
	}, {
		Name:                    "the annotation asks for Delete under the default Retain policy",
		Objects:                 []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Delete"))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, records(deleting)...),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:                    "the annotation asks for Retain under the Delete policy",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Retain"))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:                    "an invalid annotation retains the images and says so, naming the snapshot and the annotation",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deletingWith(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Purge"))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind,
			`SandboxSnapshot %s/%s: annotation %s: "Purge" is neither "Retain" nor "Delete"; the images are retained`, ns, snapName, sandbox.ImageDeletionPolicyAnnotation)},
	}, {
		Name:                    "records an earlier pass made are kept",
		Ctx:                     deletePolicy,
		Objects:                 append([]runtime.Object{deleting}, records(deleting)[0]),
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             withCreates(deleting, records(deleting)...),
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:                    "a record that cannot be written keeps the finalizer, and is retried",
		Ctx:                     deletePolicy,
		Objects:                 []runtime.Object{deleting},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "configmaps")},
		WantErr:                 true,
		WantCreates:             withCreates(deleting, records(deleting)[0]),
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"creating image deletion record %s/%s: inducing failure for create configmaps", f.trNamespace, records(deleting)[0].(metav1.Object).GetName())},
	}, {
		Name:        "a Failed snapshot recorded no digests and kept nothing on its node: nothing to delete or release",
		Ctx:         deletePolicy,
		Objects:     []runtime.Object{f.snap(f.committing, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:    "a new snapshot with an invalid image deletion policy annotation fails with InvalidSpec naming it",
		Objects: []runtime.Object{f.snap(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Never")), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: f.snap(WithAnnotation(sandbox.ImageDeletionPolicyAnnotation, "Never"),
			WithFailed(v1alpha1.ReasonInvalidSpec, `SandboxSnapshot team-a/snap: annotation sandbox.opensandbox.io/image-deletion-policy: "Never" is neither "Retain" nor "Delete"`))}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec,
			`SandboxSnapshot team-a/snap: annotation sandbox.opensandbox.io/image-deletion-policy: "Never" is neither "Retain" nor "Delete"`)},
	}}
	rows.Test(t, MakeFactory(newReconciler))
}
