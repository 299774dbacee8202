//go:build e2e

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

package e2e

import (
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// loopbackRegistry serves go-containerregistry's registry on 127.0.0.1 for
// the test, and returns its host:port. The controller, a local process,
// reaches it there.
func loopbackRegistry(t *testing.T) string {
	t.Helper()
	return test.ListenAndServe(t, "127.0.0.1:0", registry.New(registry.Logger(log.New(io.Discard, "", 0))))
}

// useRegistry points config-snapshot at a loopback registry, with more
// settings, and creates snapshots of sandbox sb until one names an image
// there: from then on the controller runs with the patch. A snapshot made
// before the controller saw the patch has its commit failed, so that it
// frees the pod and holds no image deletion. It returns the first snapshot
// that names the loopback registry, Committing.
func useRegistry(t *testing.T, e *framework.Env, host string, settings map[string]any) *v1alpha1.SandboxSnapshot {
	t.Helper()
	patch := map[string]any{config.RegistryKey: host + "/snapshots", config.InsecureRegistryKey: "true"}
	for k, v := range settings {
		patch[k] = v
	}
	patchSnapshotConfig(t, e, patch)
	deadline := time.Now().Add(framework.Timeout)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("probe-%d", i)
		e.CreateSnapshot(name, "sb")
		s := e.WaitSnapshot(name, "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
		if strings.HasPrefix(s.Status.Containers[0].ImageURI, host+"/") {
			return s
		}
		t.Logf("%s names %s: config change not seen yet", name, s.Status.Containers[0].ImageURI)
		tr := names.CommitTaskRun(s)
		e.WaitTaskRun(tr, "to exist", nil)
		e.SetTaskRunStatus(tr, framework.Failed(pipelinev1.TaskRunReasonFailed, "not this one"))
		e.WaitSnapshot(name, "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
	}
	t.Fatalf("no snapshot named an image in %s within %v", host, framework.Timeout)
	return nil
}

// pushAndSucceed plays the commit of a Committing snapshot: it pushes img
// to each container's imageUri and ends the TaskRun with their digests. It
// returns the snapshot, Succeed.
func pushAndSucceed(t *testing.T, e *framework.Env, s *v1alpha1.SandboxSnapshot, img v1.Image) *v1alpha1.SandboxSnapshot {
	t.Helper()
	var digests []string
	for _, c := range s.Status.Containers {
		ref, err := name.ParseReference(c.ImageURI, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(e.Ctx)); err != nil {
			t.Fatalf("pushing %s: %v", ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	tr := names.CommitTaskRun(s)
	e.WaitTaskRun(tr, "to exist", nil)
	e.SetTaskRunStatus(tr, framework.Succeeded(5, digests...))
	return e.WaitSnapshot(s.Name, "Succeed", framework.IsPhase(v1alpha1.PhaseSucceed))
}

// manifestHeld reports whether the registry holds the manifest of a
// snapshot's first container.
func manifestHeld(t *testing.T, s *v1alpha1.SandboxSnapshot) bool {
	t.Helper()
	return test.ManifestHeld(t.Context(), t, test.PinnedDigests(t, s)[0])
}

// deleteSnapshot deletes a snapshot and waits until it is gone.
func deleteSnapshot(e *framework.Env, name string) {
	e.T.Helper()
	test.DeleteSnapshot(e.Ctx, e.T, e.C, e.NS, name, framework.Timeout)
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestTaskRunRetention: completed TaskRuns go after their retention, the
// snapshot keeps its phase and digests, and no TaskRun is created again.
func TestTaskRunRetention(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := loopbackRegistry(t)
	probe := useRegistry(t, e, host, map[string]any{
		config.TaskRunRetentionSucceededKey: "2s",
		config.TaskRunRetentionFailedKey:    "4s",
	})

	ok := pushAndSucceed(t, e, probe, randomImage(t))
	trName := names.CommitTaskRun(ok)
	start := time.Now()
	e.WaitTaskRunGone(trName)
	t.Logf("TaskRun %s of a Succeed snapshot deleted %v after it completed", trName, time.Since(start).Round(100*time.Millisecond))
	waitEvent(e, ok.Name, v1alpha1.ReasonTaskRunRemoved)

	e.CreateSnapshot("fails", "sb")
	f := e.WaitSnapshot("fails", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	failName := names.CommitTaskRun(f)
	e.WaitTaskRun(failName, "to exist", nil)
	e.SetTaskRunStatus(failName, framework.Failed(pipelinev1.TaskRunReasonFailed, "\"step-push\" exited with code 1"))
	e.WaitSnapshot("fails", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
	e.WaitTaskRunGone(failName)
	waitEvent(e, "fails", v1alpha1.ReasonTaskRunRemoved)

	// Give a wrong re-creation time to show, then check nothing came back.
	time.Sleep(3 * time.Second)
	for name, want := range map[string]v1alpha1.SandboxSnapshotPhase{ok.Name: v1alpha1.PhaseSucceed, "fails": v1alpha1.PhaseFailed} {
		s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Status.Phase != want {
			t.Errorf("%s: phase %s after its TaskRun was removed, want %s", name, s.Status.Phase, want)
		}
		if trs := e.TaskRunsOf(name); len(trs) != 0 {
			t.Errorf("%s: TaskRuns %v exist after the retention", name, test.TaskRunNames(trs))
		}
		tr := names.CommitTaskRun(s)
		if n := e.TaskRuns.Created()[tr]; n != 1 {
			t.Errorf("TaskRun %s was created %d times, want once", tr, n)
		}
		if framework.OwnStatusFields() && !slices.ContainsFunc(s.Status.RemovedTaskRuns, func(r v1alpha1.RemovedTaskRun) bool { return r.Name == tr }) {
			t.Errorf("%s: status.removedTaskRuns = %v, want %s", name, s.Status.RemovedTaskRuns, tr)
		}
	}
	s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, ok.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.Containers[0].ImageDigest != ok.Status.Containers[0].ImageDigest || s.Status.Containers[0].ImageDigest == "" {
		t.Errorf("digest %q after the retention, want %q", s.Status.Containers[0].ImageDigest, ok.Status.Containers[0].ImageDigest)
	}
}

// TestImageDeletionPolicy: under Delete, a deleted snapshot goes at once,
// and its manifest goes from a real registry once nothing refers to it: not
// while another snapshot records it, nor while another snapshot of the
// sandbox commits; Retain keeps it.
func TestImageDeletionPolicy(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := loopbackRegistry(t)
	first := useRegistry(t, e, host, map[string]any{config.ImageDeletionPolicyKey: "Delete"})
	shared := randomImage(t)
	first = pushAndSucceed(t, e, first, shared)

	// A second snapshot of the same sandbox records the same manifest.
	e.CreateSnapshot("second", "sb")
	second := pushAndSucceed(t, e, e.WaitSnapshot("second", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting)), shared)
	if first.Status.Containers[0].ImageDigest != second.Status.Containers[0].ImageDigest {
		t.Fatalf("digests differ: %s, %s", first.Status.Containers[0].ImageDigest, second.Status.Containers[0].ImageDigest)
	}
	deleteSnapshot(e, first.Name)
	waitEvent(e, first.Name, v1alpha1.ReasonImageDeletionDeferred)
	if !manifestHeld(t, second) {
		t.Fatal("the manifest SandboxSnapshot second still records was deleted with the first")
	}

	// While a third snapshot of the sandbox commits, the manifest stays;
	// the second goes at once all the same.
	e.CreateSnapshot("third", "sb")
	third := e.WaitSnapshot("third", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	deleteSnapshot(e, "second")
	waitEvent(e, "second", v1alpha1.ReasonImageDeletionDeferred)
	if !manifestHeld(t, second) {
		t.Fatal("the manifest was deleted while another snapshot of the sandbox committed")
	}
	retained := randomImage(t)
	third = pushAndSucceed(t, e, third, retained)
	waitEvent(e, "second", v1alpha1.ReasonImagesDeleted)
	waitEvent(e, first.Name, v1alpha1.ReasonImagesDeleted)
	if manifestHeld(t, second) {
		t.Error("the manifest of the last snapshot recording it is still in the registry after its deletion")
	}
	waitNoImageDeletions(e)

	// The annotation keeps the third's images under the Delete policy.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"Retain"}}}`, sandbox.ImageDeletionPolicyAnnotation)
	if _, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, third.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteSnapshot(e, third.Name)
	if !manifestHeld(t, third) {
		t.Error("the manifest of a snapshot annotated Retain was deleted")
	}
}

// TestImageDeletionWaitsForPodsAndTemplates plays OpenSandbox's resume
// under the Delete policy: the BatchSandbox's template and a new pod name
// the snapshot's pinned imageUri, and <sandbox>-pause is deleted. The
// snapshot goes at once; its manifest stays while the pod or the template
// names it, and goes when neither does.
func TestImageDeletionWaitsForPodsAndTemplates(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := loopbackRegistry(t)
	s := pushAndSucceed(t, e, useRegistry(t, e, host, map[string]any{config.ImageDeletionPolicyKey: "Delete"}), randomImage(t))
	pinned := s.Status.Containers[0].ImageURI
	if !strings.HasSuffix(pinned, "@"+s.Status.Containers[0].ImageDigest) {
		t.Fatalf("imageUri %s is not pinned to digest %s", pinned, s.Status.Containers[0].ImageDigest)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, pinned)
	if _, err := e.C.Dynamic.Resource(test.BatchSandboxes).Namespace(e.NS).Patch(e.Ctx, "sb", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	resumed := test.MustParse[corev1.Pod](t, `
apiVersion: v1
kind: Pod
metadata:
  name: sb-resumed
  namespace: %s
spec:
  containers:
    - name: app
      image: %s
`, e.NS, pinned)
	if _, err := e.C.Kube.CoreV1().Pods(e.NS).Create(e.Ctx, resumed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteSnapshot(e, s.Name)
	waitEvent(e, s.Name, v1alpha1.ReasonImageDeletionDeferred)
	if !manifestHeld(t, s) {
		t.Fatal("the manifest a pod and a BatchSandbox template name was deleted")
	}

	if err := e.C.Kube.CoreV1().Pods(e.NS).Delete(e.Ctx, resumed.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// The template still names it: a pod created again (after a drain or an
	// eviction) pulls it.
	time.Sleep(2 * time.Second)
	if !manifestHeld(t, s) {
		t.Fatal("the manifest a BatchSandbox template names was deleted")
	}

	patch = `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.test/elsewhere:1"}]}}}}`
	if _, err := e.C.Dynamic.Resource(test.BatchSandboxes).Namespace(e.NS).Patch(e.Ctx, "sb", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(e, s.Name, v1alpha1.ReasonImagesDeleted)
	if manifestHeld(t, s) {
		t.Error("the manifest is still in the registry once nothing names it")
	}
	waitNoImageDeletions(e)
}

// TestImageDeletionWaitsForMemorySnapshots plays a sandbox paused with a
// filesystem snapshot, resumed from it, and paused again with memory, under
// the Delete policy: the second snapshot's image is a checkpoint image whose
// base is the first's, which containerd's restore pulls every time. The
// first snapshot goes at once; its manifest stays while the registry holds
// the checkpoint image, and goes once it does not.
func TestImageDeletionWaitsForMemorySnapshots(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := loopbackRegistry(t)
	first := pushAndSucceed(t, e, useRegistry(t, e, host, map[string]any{config.ImageDeletionPolicyKey: "Delete"}), randomImage(t))
	checkpoint := mutate.Annotations(randomImage(t), map[string]string{
		task.AnnotationCheckpointName:     "app",
		ocispec.AnnotationBaseImageDigest: first.Status.Containers[0].ImageDigest,
	}).(v1.Image)
	e.CreateSnapshot("memory", "sb")
	memory := pushAndSucceed(t, e, e.WaitSnapshot("memory", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting)), checkpoint)

	deleteSnapshot(e, first.Name)
	test.WaitForEvent(e.Ctx, t, e.C, e.NS, first.Name, v1alpha1.ReasonImageDeletionDeferred,
		"memory snapshot image "+memory.Status.Containers[0].ImageURI, framework.Timeout)
	if !manifestHeld(t, first) {
		t.Fatal("the base of a memory snapshot's image the registry holds was deleted")
	}

	// The checkpoint image goes (here straight from the registry); the
	// memory snapshot's deletion, Retain, makes the first's record be
	// looked at again.
	if err := remote.Delete(test.PinnedDigests(t, memory)[0], remote.WithContext(e.Ctx)); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"Retain"}}}`, sandbox.ImageDeletionPolicyAnnotation)
	if _, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, memory.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteSnapshot(e, memory.Name)
	waitEvent(e, first.Name, v1alpha1.ReasonImagesDeleted)
	if manifestHeld(t, first) {
		t.Error("the manifest is still in the registry once no checkpoint image restores from it")
	}
	waitNoImageDeletions(e)
}

// TestImageDeletionRefused: a registry that refuses deletion, as
// distribution does unless told otherwise, leaves the image behind at once,
// saying so; the snapshot is gone within seconds.
func TestImageDeletionRefused(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := refusingRegistry(t)
	s := pushAndSucceed(t, e, useRegistry(t, e, host, map[string]any{config.ImageDeletionPolicyKey: "Delete"}), randomImage(t))
	start := time.Now()
	deleteSnapshot(e, s.Name)
	waitEvent(e, s.Name, v1alpha1.ReasonImagesLeftBehind)
	t.Logf("snapshot gone and ImagesLeftBehind reported %v after the deletion", time.Since(start).Round(100*time.Millisecond))
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the refusal took %v to report; it ends the deletion at once", d)
	}
	if !manifestHeld(t, s) {
		t.Error("the refusing registry lost the manifest")
	}
	waitNoImageDeletions(e)
}

// TestImageDeletionOnlyOwnImages plays an account that may write snapshot
// status (OpenSandbox's controller may, in every namespace) naming another
// namespace's image in a snapshot whose commit TaskRun is gone, under the
// Delete policy: deleting the snapshot leaves that image in the registry
// and an ImageDeletionRefused event names it; the image the snapshot still
// names of its own goes.
func TestImageDeletionOnlyOwnImages(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app", "sidecar"}})
	host := loopbackRegistry(t)
	s := pushAndSucceed(t, e, useRegistry(t, e, host, map[string]any{
		config.ImageDeletionPolicyKey:       "Delete",
		config.TaskRunRetentionSucceededKey: "0",
	}), randomImage(t))
	// With the TaskRun gone, only the repository tells whose an image is.
	e.WaitTaskRunGone(names.CommitTaskRun(s))

	tagged, err := name.NewTag(host+"/snapshots/another-tenant/sb/app:theirs", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	theirs := randomImage(t)
	if err := remote.Write(tagged, theirs, remote.WithContext(e.Ctx)); err != nil {
		t.Fatalf("pushing %s: %v", tagged, err)
	}
	d, err := theirs.Digest()
	if err != nil {
		t.Fatal(err)
	}
	victim := tagged.Context().Digest(d.String())

	// A controller status write replaces the whole status: one from a pass
	// that began before the edit (the TaskRun's removal) undoes it. Edit
	// until the edit holds.
	snaps := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS)
	for attempt := 1; ; attempt++ {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := snaps.Get(e.Ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Containers[0].ImageURI = tagged.String() + "@" + d.String()
			cur.Status.Containers[0].ImageDigest = d.String()
			_, err = snaps.UpdateStatus(e.Ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("editing status.containers[0] of SandboxSnapshot %s/%s: %v", e.NS, s.Name, err)
		}
		time.Sleep(2 * time.Second)
		cur, err := snaps.Get(e.Ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status.Containers[0].ImageDigest == d.String() {
			break
		}
		if attempt == 5 {
			t.Fatalf("status.containers[0] of SandboxSnapshot %s/%s was written back %d times:\n%s", e.NS, s.Name, attempt, framework.Dump(cur.Status))
		}
		t.Logf("status.containers[0] of SandboxSnapshot %s/%s was written back; editing it again", e.NS, s.Name)
	}
	own := test.PinnedDigests(t, s)[1]

	deleteSnapshot(e, s.Name)
	test.WaitForEvent(e.Ctx, t, e.C, e.NS, s.Name, v1alpha1.ReasonImageDeletionRefused, "image "+victim.Name()+" is not the snapshot's to delete", framework.Timeout)
	waitEvent(e, s.Name, v1alpha1.ReasonImagesDeleted)
	if !test.ManifestHeld(e.Ctx, t, victim) {
		t.Errorf("%s, another namespace's image the snapshot's status was edited to name, was deleted", victim)
	}
	if test.ManifestHeld(e.Ctx, t, own) {
		t.Errorf("%s, the snapshot's own image, is still in the registry after its deletion", own)
	}
	waitNoImageDeletions(e)
}

// refusingRegistry serves a registry on 127.0.0.1 that refuses to delete
// manifests, as distribution without REGISTRY_STORAGE_DELETE_ENABLED does.
func refusingRegistry(t *testing.T) string {
	t.Helper()
	return test.ListenAndServe(t, "127.0.0.1:0", test.RefuseDeletes(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
}

// waitNoImageDeletions waits until no image deletion record of this test's
// namespace is left in the operator's namespace.
func waitNoImageDeletions(e *framework.Env) {
	e.T.Helper()
	deadline := time.Now().Add(framework.Timeout)
	for {
		cms, err := e.C.Kube.CoreV1().ConfigMaps(test.SystemNamespace).List(e.Ctx, metav1.ListOptions{LabelSelector: snapshotimage.RecordLabel + "=true"})
		if err != nil {
			e.T.Fatal(err)
		}
		var left []string
		for _, cm := range cms.Items {
			if rec, err := snapshotimage.ParseRecord(&cm); err == nil && rec.Snapshot.Namespace == e.NS {
				left = append(left, cm.Name+" ("+rec.Image+", waiting for "+rec.WaitingFor+")")
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("image deletion records left after %v: %v", framework.Timeout, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestImageMissing: a Succeed snapshot whose manifest is deleted behind its
// back is marked, and the mark goes when the manifest is back; the phase
// stays Succeed throughout.
func TestImageMissing(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app"}})
	host := loopbackRegistry(t)
	// Every Succeed snapshot of the cluster is checked each second now: a
	// global bound high enough not to make this one wait behind them. The
	// TaskRun goes at once: a status write that OpenSandbox's CRD prunes
	// (status.removedTaskRuns) must not stop the checks that follow.
	s := useRegistry(t, e, host, map[string]any{config.ImageCheckIntervalKey: "1s", config.ImageChecksPerMinuteKey: "6000",
		config.TaskRunRetentionSucceededKey: "0"})
	img := randomImage(t)
	s = pushAndSucceed(t, e, s, img)
	e.WaitTaskRunGone(names.CommitTaskRun(s))
	c := s.Status.Containers[0]
	ref := test.PinnedDigests(t, s)[0]
	if err := remote.Delete(ref, remote.WithContext(e.Ctx)); err != nil {
		t.Fatal(err)
	}
	want := ref.String()
	marked := e.WaitSnapshot(s.Name, "marked image-missing", func(s *v1alpha1.SandboxSnapshot) bool {
		return s.Annotations[sandbox.ImageMissingAnnotation] != "" && (!framework.OwnStatusFields() || len(s.Status.MissingImages) > 0)
	})
	if got := marked.Annotations[sandbox.ImageMissingAnnotation]; got != want {
		t.Errorf("annotation %s = %q, want %q", sandbox.ImageMissingAnnotation, got, want)
	}
	if marked.Status.Phase != v1alpha1.PhaseSucceed || marked.Status.Containers[0].ImageDigest != c.ImageDigest {
		t.Errorf("phase %s, digest %s after the image went; want them unchanged", marked.Status.Phase, marked.Status.Containers[0].ImageDigest)
	}
	if framework.OwnStatusFields() && !slices.Equal(marked.Status.MissingImages, []string{want}) {
		t.Errorf("status.missingImages = %v, want [%s]", marked.Status.MissingImages, want)
	}
	waitEvent(e, s.Name, v1alpha1.ReasonImageMissing)

	// By digest: this registry kept the tag, and a write by tag would find
	// it and upload nothing.
	if err := remote.Write(ref, img, remote.WithContext(e.Ctx)); err != nil {
		t.Fatal(err)
	}
	cleared := e.WaitSnapshot(s.Name, "unmarked", func(s *v1alpha1.SandboxSnapshot) bool {
		_, ok := s.Annotations[sandbox.ImageMissingAnnotation]
		return !ok && len(s.Status.MissingImages) == 0
	})
	if cleared.Status.Phase != v1alpha1.PhaseSucceed {
		t.Errorf("phase %s once the image is back, want Succeed", cleared.Status.Phase)
	}
	waitEvent(e, s.Name, v1alpha1.ReasonImageRestored)
}
