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
	"os"
	"strings"
	"testing"

	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// skipUnlessProjectCRD skips a test of a rule that only the project's own
// SandboxSnapshot CRD (config/300-sandboxsnapshot.yaml) has, when the cluster
// runs OpenSandbox's instead (SNAPSHOT_CRDS=opensandbox, make e2e-opensandbox).
func skipUnlessProjectCRD(t *testing.T, rule string) {
	t.Helper()
	if crds := os.Getenv("SNAPSHOT_CRDS"); crds == "opensandbox" {
		t.Skipf("SNAPSHOT_CRDS=%s: OpenSandbox's SandboxSnapshot CRD has no %s; this checks the project's CRD", crds, rule)
	}
}

// TestCRDValidation checks the SandboxSnapshot CRD (config/300-sandboxsnapshot.yaml)
// as the real apiserver enforces it. Under OpenSandbox's CRD
// (SNAPSHOT_CRDS=opensandbox) the rules it lacks are skipped; the rest hold
// for it too.
func TestCRDValidation(t *testing.T) {
	e := framework.Setup(t)
	snaps := e.C.Dynamic.Resource(framework.SnapshotGVR).Namespace(e.NS)

	t.Run("OpenSandboxShapedObjectAccepted", func(t *testing.T) {
		// What OpenSandbox's server creates: a snapshot named osb-snap-<id>,
		// controlled by its BatchSandbox, with OpenSandbox's own class so that
		// this controller leaves it alone; then the status OpenSandbox writes.
		sb := test.MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: BatchSandbox
metadata:
  name: osb-sandbox
  namespace: %s
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: app
        image: 127.0.0.1:5000/busybox:latest
`, e.NS)
		sb, err := e.C.Dynamic.Resource(test.BatchSandboxes).Namespace(e.NS).Create(e.Ctx, sb, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating BatchSandbox: %v", err)
		}
		obj := test.MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: osb-snap-0123456789abcdef0123456789abcdef
  namespace: %s
  labels:
    sandbox.opensandbox.io/sandbox-name: osb-sandbox
  annotations:
    sandbox.opensandbox.io/snapshot-class: opensandbox
  ownerReferences:
  - apiVersion: sandbox.opensandbox.io/v1alpha1
    kind: BatchSandbox
    name: osb-sandbox
    uid: %s
    controller: true
    blockOwnerDeletion: true
spec:
  sandboxName: osb-sandbox
`, e.NS, sb.GetUID())
		created, err := snaps.Create(e.Ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("an OpenSandbox-shaped SandboxSnapshot was refused: %v", err)
		}
		status := test.MustParseUnstructured(t, `
phase: Succeed
sourcePodName: osb-sandbox-0
sourceNodeName: node-a
containers:
- containerName: app
  imageUri: registry.example.com/snapshots/osb-sandbox-app:snap-0123456789abcdef0123456789abcdef
  imageDigest: sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
`)
		created.Object["status"] = status.Object
		updated, err := snaps.UpdateStatus(e.Ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("OpenSandbox's status was refused: %v", err)
		}
		got, _, _ := unstructured.NestedSlice(updated.Object, "status", "containers")
		if len(got) != 1 || got[0].(map[string]any)["imageDigest"] == nil {
			t.Errorf("status.containers did not survive the round trip: %v", got)
		}

		// A snapshot of this controller's class, created after it: once it is
		// terminal, the controller has seen both, and must have left the other
		// class alone (no finalizer, status untouched).
		e.CreateSnapshot("after-osb", "no-such-sandbox")
		e.WaitSnapshot("after-osb", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
		s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Finalizers) != 0 || s.Status.Phase != v1alpha1.PhaseSucceed || len(s.Status.Conditions) != 0 {
			t.Errorf("the controller touched a snapshot of class opensandbox: finalizers %v, status:\n%s", s.Finalizers, framework.Dump(s.Status))
		}
	})

	refused := func(t *testing.T, err error, wants ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("the apiserver accepted it")
		}
		if !apierrs.IsInvalid(err) {
			t.Fatalf("error %v is not Invalid", err)
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		t.Logf("refused: %v", err)
	}

	t.Run("MissingSandboxNameRejected", func(t *testing.T) {
		_, err := snaps.Create(e.Ctx, test.MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: no-sandbox-name
  namespace: %s
spec: {}
`, e.NS), metav1.CreateOptions{})
		refused(t, err, "spec.sandboxName", "Required value")
	})

	t.Run("MissingSpecRejected", func(t *testing.T) {
		skipUnlessProjectCRD(t, "required spec")
		_, err := snaps.Create(e.Ctx, test.MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: no-spec
  namespace: %s
`, e.NS), metav1.CreateOptions{})
		refused(t, err, "spec", "Required value")
	})

	for _, tc := range []struct{ name, value, want string }{
		{"Uppercase", "Bad_Name", "should match"},
		{"Empty", "", "should be at least 1 chars long"},
		{"TooLong", strings.Repeat("a", 254), "may not be more than 253"},
	} {
		t.Run("InvalidSandboxNameRejected/"+tc.name, func(t *testing.T) {
			skipUnlessProjectCRD(t, "pattern or length limits on spec.sandboxName")
			s := &v1alpha1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-" + strings.ToLower(tc.name), Namespace: e.NS},
				Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: tc.value},
			}
			_, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Create(e.Ctx, s, metav1.CreateOptions{})
			refused(t, err, "spec.sandboxName", tc.want)
		})
	}

	t.Run("SpecEditRejected", func(t *testing.T) {
		skipUnlessProjectCRD(t, "CEL rule making spec immutable")
		e.CreateSnapshot("immutable", "some-sandbox")
		// A merge patch: it cannot conflict with the controller's own writes.
		_, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, "immutable", types.MergePatchType,
			[]byte(`{"spec":{"sandboxName":"another-sandbox"}}`), metav1.PatchOptions{})
		refused(t, err, "spec", "spec is immutable")
		// Metadata stays editable.
		if _, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, "immutable", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"edited":"true"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("a label edit was refused: %v", err)
		}
	})

	t.Run("UnknownFieldsPruned", func(t *testing.T) {
		created, err := snaps.Create(e.Ctx, test.MustParseUnstructured(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: pruned
  namespace: %s
spec:
  sandboxName: some-sandbox
  retainPolicy: Keep
topLevelExtra: 1
`, e.NS), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating: %v", err)
		}
		got, err := snaps.Get(e.Ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "retainPolicy"); found {
			t.Error("spec.retainPolicy was stored; unknown fields must be pruned")
		}
		if _, found := got.Object["topLevelExtra"]; found {
			t.Error("topLevelExtra was stored; unknown fields must be pruned")
		}
		if name, _, _ := unstructured.NestedString(got.Object, "spec", "sandboxName"); name != "some-sandbox" {
			t.Errorf("spec.sandboxName = %q after pruning", name)
		}
	})
}
