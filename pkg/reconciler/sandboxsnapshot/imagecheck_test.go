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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/controller"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrytest"
)

func TestImageCheck(t *testing.T) {
	f := newRetentionFixture()
	succeed := WithSucceeded(412, digestA, digestB)
	imageA := registryPrefix + "/team-a/sb/app@" + digestA
	imageB := registryPrefix + "/team-a/sb/sidecar@" + digestB
	missingA := imageA
	// checking configures the check and makes the snapshot due: first seen
	// two hours ago.
	checking := func(ctx context.Context, interval string) context.Context {
		seen := newImageChecks()
		seen.last[types.UID(snapName+"-uid")] = Now.Add(-2 * time.Hour)
		return withImageChecks(config.ToContext(ctx, &config.Config{Snapshot: mustConfig(map[string]string{
			config.RegistryKey: registryPrefix, config.ImageCheckIntervalKey: interval, config.TaskRunRetentionSucceededKey: "-1"})}), seen)
	}
	holding := func(refs ...string) *registrytest.Fake {
		r := &registrytest.Fake{Held: map[string]string{}}
		for _, ref := range refs {
			r.Held[ref] = ref[len(ref)-71:]
		}
		return r
	}
	annotate := func(value any) clientgotesting.PatchActionImpl {
		v := "null"
		if s, ok := value.(string); ok {
			v = `"` + s + `"`
		}
		return clientgotesting.PatchActionImpl{
			ActionImpl: clientgotesting.ActionImpl{Namespace: ns},
			Name:       snapName,
			Patch:      []byte(`{"metadata":{"annotations":{"` + sandbox.ImageMissingAnnotation + `":` + v + `}}}`),
		}
	}
	withMissing := func(images ...string) SnapshotOption {
		return func(s *v1alpha1.SandboxSnapshot) { s.Status.MarkImagesMissing(images) }
	}
	lookedUp := func(r *registrytest.Fake, want int) func(*testing.T, *rtesting.TableRow) {
		return func(t *testing.T, _ *rtesting.TableRow) {
			if len(r.LookedUp) != want {
				t.Errorf("looked up %v, want %d look-ups", r.LookedUp, want)
			}
		}
	}

	// A snapshot OpenSandbox's controller made before the switch: imageUri
	// is the tag, imageDigest nerdctl's image ID, which names no manifest.
	const (
		configA = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
		configB = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	)
	openSandboxMade := f.snap(WithOpenSandboxCommitting("sb-0", node, committed), WithOpenSandboxSucceeded(configA, configB))
	tagA, tagB := committed[0].ImageURI, committed[1].ImageURI
	byTag := &registrytest.Fake{Held: map[string]string{tagA: digestA, tagB: digestB}}
	tagGone := &registrytest.Fake{Held: map[string]string{tagB: digestB}}

	present, gone, back, still, off, down := holding(imageA, imageB), holding(imageB), holding(imageA, imageB), holding(imageB), holding(), holding()
	down.Err = errors.New("503 Service Unavailable")
	table := rtesting.TableTest{{
		Name:           "a Succeed snapshot whose images the registry holds is left alone and looked at again after the interval",
		Ctx:            withRegistry(checking(context.Background(), "1h"), present),
		Objects:        []runtime.Object{f.snap(f.committing, succeed)},
		Key:            key,
		WantErr:        true, // the requeue after the interval
		PostConditions: []func(*testing.T, *rtesting.TableRow){lookedUp(present, 2)},
	}, {
		Name:              "a Succeed snapshot whose image is gone is marked, its phase, containers and conditions untouched",
		Ctx:               withRegistry(checking(context.Background(), "1h"), gone),
		Objects:           []runtime.Object{f.snap(f.committing, succeed)},
		Key:               key,
		WantErr:           true,
		WantPatches:       []clientgotesting.PatchActionImpl{annotate(missingA)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: f.snap(f.committing, succeed, WithAnnotation(sandbox.ImageMissingAnnotation, missingA), withMissing(missingA))}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImageMissing,
			"The registry no longer holds %s; the snapshot cannot be restored from it", missingA)},
	}, {
		Name:              "the mark is cleared when the image is back",
		Ctx:               withRegistry(checking(context.Background(), "1h"), back),
		Objects:           []runtime.Object{f.snap(f.committing, succeed, WithAnnotation(sandbox.ImageMissingAnnotation, missingA), withMissing(missingA))},
		Key:               key,
		WantErr:           true,
		WantPatches:       []clientgotesting.PatchActionImpl{annotate(nil)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: f.snap(f.committing, succeed)}},
		WantEvents:        []string{rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonImageRestored, "The registry holds every image of the snapshot again")},
	}, {
		Name:    "a snapshot already marked is not marked again",
		Ctx:     withRegistry(checking(context.Background(), "1h"), still),
		Objects: []runtime.Object{f.snap(f.committing, succeed, WithAnnotation(sandbox.ImageMissingAnnotation, missingA), withMissing(missingA))},
		Key:     key,
		WantErr: true,
	}, {
		Name:           "interval 0 turns the check off",
		Ctx:            withRegistry(checking(context.Background(), "0"), off),
		Objects:        []runtime.Object{f.snap(f.committing, succeed)},
		Key:            key,
		PostConditions: []func(*testing.T, *rtesting.TableRow){lookedUp(off, 0)},
	}, {
		Name:    "a registry that cannot be asked marks nothing",
		Ctx:     withRegistry(checking(context.Background(), "1h"), down),
		Objects: []runtime.Object{f.snap(f.committing, succeed)},
		Key:     key,
		WantErr: true,
	}, {
		Name:           "a snapshot OpenSandbox's controller made, whose imageUri is a tag, is looked up by its tag, not by the image ID",
		Ctx:            withRegistry(checking(context.Background(), "1h"), byTag),
		Objects:        []runtime.Object{openSandboxMade},
		Key:            key,
		WantErr:        true,
		PostConditions: []func(*testing.T, *rtesting.TableRow){lookedUp(byTag, 2)},
	}, {
		Name:              "a snapshot OpenSandbox's controller made whose tag is gone is marked, naming the tag",
		Ctx:               withRegistry(checking(context.Background(), "1h"), tagGone),
		Objects:           []runtime.Object{openSandboxMade},
		Key:               key,
		WantErr:           true,
		WantPatches:       []clientgotesting.PatchActionImpl{annotate(tagA)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: f.snap(WithOpenSandboxCommitting("sb-0", node, committed), WithOpenSandboxSucceeded(configA, configB), WithAnnotation(sandbox.ImageMissingAnnotation, tagA), withMissing(tagA))}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonImageMissing,
			"The registry no longer holds %s; the snapshot cannot be restored from it", tagA)},
	}, {
		Name:           "a Failed snapshot is not checked",
		Ctx:            withRegistry(checking(context.Background(), "1h"), off),
		Objects:        []runtime.Object{f.snap(f.committing, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"))},
		Key:            key,
		PostConditions: []func(*testing.T, *rtesting.TableRow){lookedUp(off, 0)},
	}}
	table.Test(t, MakeFactory(newReconciler))
}

// TestImageCheckRateBound checks both bounds: a snapshot is looked up at
// most once per interval, and all snapshots at most image-checks-per-minute.
func TestImageCheckRateBound(t *testing.T) {
	c := newImageChecks()
	at := func(d time.Duration) time.Time { return Now.Add(d) }
	for _, step := range []struct {
		uid      types.UID
		at       time.Duration
		ok       bool
		wait     time.Duration
		describe string
	}{
		{"a", 0, false, time.Hour, "a first seen: looked up one interval later"},
		{"b", 0, false, time.Hour, "b first seen"},
		{"c", 0, false, time.Hour, "c first seen"},
		{"d", 10 * time.Minute, false, time.Hour, "d first seen later"},
		{"a", 10 * time.Minute, false, 50 * time.Minute, "a within the interval"},
		{"a", time.Hour, true, 0, "a after the interval"},
		{"b", time.Hour, false, 30 * time.Second, "b right after a at 2 per minute: it books the next slot"},
		{"c", time.Hour, false, time.Minute, "c: the slot after b's"},
		{"b", time.Hour + 30*time.Second, true, 0, "b at its slot"},
		{"c", time.Hour + 30*time.Second, false, 30 * time.Second, "c before its slot"},
		{"c", time.Hour + time.Minute, true, 0, "c at its slot"},
		{"d", 70 * time.Minute, true, 0, "d one interval after it was first seen, the budget refilled"},
		{"a", 2 * time.Hour, true, 0, "a again one interval later"},
	} {
		ok, wait := c.due(step.uid, at(step.at), time.Hour, 2)
		if ok != step.ok || wait != step.wait {
			t.Errorf("%s: due() = %v, %v; want %v, %v", step.describe, ok, wait, step.ok, step.wait)
		}
	}
	c.forget("b")
	if ok, wait := c.due("b", at(3*time.Hour), time.Hour, 60); ok || wait != time.Hour {
		t.Errorf("a forgotten b: due() = %v, %v; want it seen anew", ok, wait)
	}
}

// TestImageCheckRequeue checks that a snapshot is looked at again when its
// interval is over: the first time one interval after it was first seen.
func TestImageCheckRequeue(t *testing.T) {
	f := newRetentionFixture()
	s := f.snap(f.committing, WithSucceeded(412, digestA, digestB))
	reg := &registrytest.Fake{Held: map[string]string{registryPrefix + "/team-a/sb/app@" + digestA: digestA, registryPrefix + "/team-a/sb/sidecar@" + digestB: digestB}}
	clock := newReconcilerClock()
	r := &Reconciler{clock: clock, checks: newImageChecks(), registry: registryOf(withRegistry(nil, reg)), writes: newOwnWrites()}
	ctx := config.ToContext(t.Context(), &config.Config{Snapshot: mustConfig(map[string]string{config.RegistryKey: registryPrefix, config.ImageCheckIntervalKey: "30m"})})
	for i, want := range []int{0, 2} {
		if ok, d := controller.IsRequeueKey(r.checkImages(ctx, s)); !ok || d != 30*time.Minute {
			t.Errorf("pass %d: checkImages() requeue = %v, %v; want after 30m", i, ok, d)
		}
		if len(reg.LookedUp) != want {
			t.Errorf("pass %d: looked up %v, want %d look-ups", i, reg.LookedUp, want)
		}
		clock.Step(30 * time.Minute)
	}
}
