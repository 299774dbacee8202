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

// Package crd tests the deployable manifests under config/: the
// SandboxSnapshot CRD is run through the API server's own schema, pruning and
// CEL code, and checked against the Go types so that neither can drift.
package crd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

const crdFile = "../../config/300-sandboxsnapshot.yaml"

// schemaUnderTest is the CRD's v1alpha1 schema in the forms the API server uses.
type schemaUnderTest struct {
	crd        *apiextensionsv1.CustomResourceDefinition
	internal   *apiextensions.CustomResourceDefinition
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// loadCRD reads the CRD and builds its validators as the API server's
// customresource handler does.
func loadCRD(t *testing.T) *schemaUnderTest {
	t.Helper()
	return loadCRDFile(t, crdFile)
}

// loadCRDFile is loadCRD for the CRD in file.
func loadCRDFile(t *testing.T, crdFile string) *schemaUnderTest {
	t.Helper()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatalf("%s: %v", crdFile, err)
	}

	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)
	scheme.Default(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(crd, internal, nil); err != nil {
		t.Fatalf("converting the CRD to the internal version: %v", err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("want exactly one version with a schema, got %d", len(crd.Spec.Versions))
	}
	validation := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(crd.Spec.Versions[0].Schema, validation, nil); err != nil {
		t.Fatal(err)
	}
	structural, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
	if err != nil {
		t.Fatalf("the schema is not structural: %v", err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	return &schemaUnderTest{
		crd:        crd,
		internal:   internal,
		structural: structural,
		validator:  validator,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}
}

// create prunes obj and validates it as a create, returning every error the
// API server would report.
func (s *schemaUnderTest) create(t *testing.T, obj map[string]any) field.ErrorList {
	t.Helper()
	pruning.Prune(obj, s.structural, true)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, s.validator)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// update prunes obj and validates it as an update of old.
func (s *schemaUnderTest) update(t *testing.T, obj, old map[string]any) field.ErrorList {
	t.Helper()
	pruning.Prune(obj, s.structural, true)
	errs := apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, s.validator)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, old, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// toMap turns a typed object into the unstructured form the API server sees.
func toMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return jsonMap(t, b)
}

// jsonMap decodes JSON as the API server does: integers become int64.
func jsonMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := utiljson.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// yamlMap parses a YAML object into its unstructured form.
func yamlMap(t *testing.T, y string) map[string]any {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return jsonMap(t, b)
}

// snapshot returns a SandboxSnapshot as OpenSandbox creates it: named
// osb-snap-<id>, controlled by its BatchSandbox.
func snapshot(sandboxName string) *v1alpha1.SandboxSnapshot {
	return &v1alpha1.SandboxSnapshot{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "SandboxSnapshot"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        "osb-snap-0123456789abcdef0123456789abcdef",
			Namespace:   "team-a",
			Generation:  1,
			Annotations: map[string]string{sandbox.ClassAnnotation: sandbox.TektonClass},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(),
				Kind:       "BatchSandbox",
				Name:       sandboxName,
				UID:        types.UID("6f1c2a4e-0000-4000-8000-000000000001"),
				Controller: boolPtr(true),
			}},
		},
		Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName},
	}
}

func boolPtr(b bool) *bool { return &b }

// statuses returns the statuses the reconciler writes over a snapshot's life,
// made with the API's own lifecycle methods.
func statuses() map[string]v1alpha1.SandboxSnapshotStatus {
	now := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(now.Add(42 * time.Second))
	containers := []v1alpha1.ContainerSnapshot{
		{ContainerName: "app", ImageURI: "registry.example.com/snap/team-a/demo/app:snap-gen3-5e6f0a1b"},
		{ContainerName: "sidecar", ImageURI: "registry.example.com/snap/team-a/demo/sidecar:snap-gen3-5e6f0a1b"},
	}
	tr := v1alpha1.TaskRunReference{Namespace: "sandbox-snapshot-system", Name: "team-a-osb-snap-0123-commit"}

	pending := v1alpha1.SandboxSnapshotStatus{ObservedGeneration: 1}
	pending.InitializeConditions(now)

	committing := *pending.DeepCopy()
	committing.MarkCommitting(now, "demo-0", "node-1", append([]v1alpha1.ContainerSnapshot(nil), containers...), tr, now)

	waiting := *pending.DeepCopy()
	waiting.MarkWaiting(now, "Waiting for SandboxSnapshot team-a/demo-pause (TaskRun %s/team-a-demo-pause-commit) to finish with pod demo-0", tr.Namespace)

	podPending := *committing.DeepCopy()
	podPending.MarkCommitPodPending(later, "TaskRun %s/%s cannot start its pod on node node-1 yet (Pending): 0/1 nodes are available", tr.Namespace, tr.Name)

	succeeded := *committing.DeepCopy()
	pause := int64(812)
	succeeded.MarkSucceeded(later, []string{
		"sha256:" + strings.Repeat("a", 64),
		"sha256:" + strings.Repeat("b", 64),
	}, &pause, tr)

	failed := *committing.DeepCopy()
	unpause := v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: "team-a-osb-snap-0123-unpause"}
	failed.MarkThawing(unpause, "demo-0", 2)
	failed.MarkFailed(later, v1alpha1.ReasonCommitOOMKilled,
		"TaskRun %s/%s failed (%s): %s; see: tkn taskrun logs %s -n %s",
		tr.Namespace, tr.Name, "TaskRunStepOOM", "step commit was OOM killed", tr.Name, tr.Namespace)

	thawed := *failed.DeepCopy()
	thawed.MarkThawed(unpause)

	removed := *succeeded.DeepCopy()
	removed.MarkTaskRunRemoved(later, tr)
	removed.MarkImagesMissing([]string{"registry.example.com/snap/team-a/demo/app@sha256:" + strings.Repeat("a", 64)})

	// A commit that OpenSandbox's own controller started before the switch.
	openSandboxCommitting := v1alpha1.SandboxSnapshotStatus{ObservedGeneration: 1, Phase: v1alpha1.PhaseCommitting,
		SourcePodName: "demo-0", SourceNodeName: "node-1",
		Containers: []v1alpha1.ContainerSnapshot{{ContainerName: "app", ImageURI: "registry.example.com/snap/demo-app:snap-gen3-5e6f0a1b"}}}
	openSandboxJob := "Job team-a/demo-pause-commit, the commit that OpenSandbox's own controller started before the switch to this operator"
	waitingForOpenSandboxJob := *openSandboxCommitting.DeepCopy()
	waitingForOpenSandboxJob.MarkWaitingForOpenSandboxJob(now, "Waiting for %s, to end", openSandboxJob)
	openSandboxJobEnded := *waitingForOpenSandboxJob.DeepCopy()
	openSandboxJobEnded.MarkFailed(later, v1alpha1.ReasonOpenSandboxJobEnded,
		"%s, failed (BackoffLimitExceeded: Job has reached the specified backoff limit); this operator does not take its result over", openSandboxJob)

	configFailed := v1alpha1.SandboxSnapshotStatus{ObservedGeneration: 1}
	configFailed.InitializeConditions(now)
	configFailed.MarkFailed(now, v1alpha1.ReasonRegistryNotConfigured, "the snapshot registry is not configured")

	return map[string]v1alpha1.SandboxSnapshotStatus{
		"empty":        {},
		"pending":      pending,
		"committing":   committing,
		"succeeded":    succeeded,
		"failed":       failed,
		"thawed":       thawed,
		"waiting":      waiting,
		"podPending":   podPending,
		"configFailed": configFailed,
		"removed":      removed,

		"waitingForOpenSandboxJob": waitingForOpenSandboxJob,
		"openSandboxJobEnded":      openSandboxJobEnded,
	}
}

func TestCRDIsAcceptedByTheAPIServer(t *testing.T) {
	s := loadCRD(t)
	internal := s.internal.DeepCopy()
	// The API server records the storage version before validating a new CRD.
	internal.Status.StoredVersions = []string{"v1alpha1"}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Fatalf("the API server would reject the CRD:\n%s", errs.ToAggregate())
	}
}

func TestCRDNamesAndVersion(t *testing.T) {
	crd := loadCRD(t).crd
	if got, want := crd.Name, "sandboxsnapshots."+sandbox.GroupName; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	if crd.Spec.Group != v1alpha1.SchemeGroupVersion.Group {
		t.Errorf("group = %q, want %q", crd.Spec.Group, v1alpha1.SchemeGroupVersion.Group)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %q, want Namespaced", crd.Spec.Scope)
	}
	names := crd.Spec.Names
	if names.Kind != "SandboxSnapshot" || names.ListKind != "SandboxSnapshotList" || names.Plural != "sandboxsnapshots" || names.Singular != "sandboxsnapshot" {
		t.Errorf("names = %+v", names)
	}
	if !reflect.DeepEqual(names.ShortNames, []string{"sbxsnap"}) {
		t.Errorf("shortNames = %v, want [sbxsnap]", names.ShortNames)
	}
	if len(names.Categories) == 0 {
		t.Error("no categories")
	}
	if crd.Spec.PreserveUnknownFields {
		t.Error("spec.preserveUnknownFields is set; unknown fields must be pruned")
	}

	v := crd.Spec.Versions[0]
	if v.Name != v1alpha1.SchemeGroupVersion.Version || !v.Served || !v.Storage {
		t.Errorf("version %q served=%v storage=%v, want %q served and stored", v.Name, v.Served, v.Storage, v1alpha1.SchemeGroupVersion.Version)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("the status subresource is not enabled")
	}
	columns := map[string]string{}
	for _, c := range v.AdditionalPrinterColumns {
		columns[strings.ToUpper(c.Name)] = c.JSONPath
	}
	for name, path := range map[string]string{
		"PHASE":   ".status.phase",
		"SANDBOX": ".spec.sandboxName",
		"AGE":     ".metadata.creationTimestamp",
	} {
		if columns[name] != path {
			t.Errorf("printer column %s has jsonPath %q, want %q", name, columns[name], path)
		}
	}
}

func TestSchemaPreservesNoUnknownFields(t *testing.T) {
	var walk func(path string, s *structuralschema.Structural)
	walk = func(path string, s *structuralschema.Structural) {
		if s == nil {
			return
		}
		if s.XPreserveUnknownFields {
			t.Errorf("%s: x-kubernetes-preserve-unknown-fields is set", path)
		}
		if s.AdditionalProperties != nil {
			t.Errorf("%s: additionalProperties is set", path)
		}
		walk(path+"[]", s.Items)
		for name, p := range s.Properties {
			walk(path+"."+name, &p)
		}
	}
	walk("", loadCRD(t).structural)
}

func TestOpenSandboxSnapshotsAreValid(t *testing.T) {
	s := loadCRD(t)
	eachStatus(t, s, func(t *testing.T, pruned, want map[string]any) {
		if !reflect.DeepEqual(pruned, want) {
			t.Errorf("pruning changed a valid object:\n got %v\nwant %v", pruned, want)
		}
	})

	// As OpenSandbox's server writes it, in YAML.
	obj := yamlMap(t, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: osb-snap-0123456789abcdef0123456789abcdef
  namespace: team-a
spec:
  sandboxName: demo
status:
  observedGeneration: 1
  phase: Succeed
  sourcePodName: demo-0
  sourceNodeName: node-1
  containers:
    - containerName: app
      imageUri: registry.example.com/snap/demo-app:snap-0123456789abcdef0123456789abcdef
      imageDigest: sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
  conditions:
    - type: Ready
      status: "True"
      reason: Succeeded
      message: Committed and pushed 1 container image(s)
      lastTransitionTime: "2026-03-01T12:00:42Z"
    - type: Failed
      status: "False"
      reason: Succeeded
      message: ""
      lastTransitionTime: "2026-03-01T12:00:42Z"
  taskRunRef:
    namespace: sandbox-snapshot-system
    name: team-a-osb-snap-0123-commit
  startTime: "2026-03-01T12:00:00Z"
  completionTime: "2026-03-01T12:00:42Z"
  pauseWindowMilliseconds: 812
`)
	if errs := s.create(t, obj); len(errs) > 0 {
		t.Fatalf("rejected:\n%s", errs.ToAggregate())
	}
}

// openSandboxCRD is OpenSandbox's own SandboxSnapshot CRD, as its repository
// ships it; OPENSANDBOX_CRDS_DIR overrides the directory.
func openSandboxCRD(t *testing.T) string {
	dir := os.Getenv("OPENSANDBOX_CRDS_DIR")
	if dir == "" {
		dir = "../../../shared/opensandbox/crds"
	}
	file := filepath.Join(dir, "sandbox.opensandbox.io_sandboxsnapshots.yaml")
	if _, err := os.Stat(file); err != nil {
		t.Skipf("OpenSandbox's CRDs are not here (%v); set OPENSANDBOX_CRDS_DIR", err)
	}
	return file
}

// TestStatusesFitOpenSandboxCRD checks every status the reconciler writes
// against OpenSandbox's own CRD: it must be accepted, and OpenSandbox's
// fields must survive pruning unchanged, so that the operator works where
// OpenSandbox installed the CRD. Only this operator's own fields are pruned.
func TestStatusesFitOpenSandboxCRD(t *testing.T) {
	theirs := []string{"observedGeneration", "phase", "sourcePodName", "sourceNodeName", "containers", "conditions"}
	eachStatus(t, loadCRDFile(t, openSandboxCRD(t)), func(t *testing.T, pruned, want map[string]any) {
		got, _ := pruned["status"].(map[string]any)
		wantStatus, _ := want["status"].(map[string]any)
		for _, f := range theirs {
			if !reflect.DeepEqual(got[f], wantStatus[f]) {
				t.Errorf("status.%s after pruning = %v, want %v", f, got[f], wantStatus[f])
			}
		}
	})
}

// eachStatus creates a snapshot with each status of statuses() under s, as
// the API server would, and checks it with check: pruned is the object
// after pruning, want the object as written. A rejected status fails.
func eachStatus(t *testing.T, s *schemaUnderTest, check func(t *testing.T, pruned, want map[string]any)) {
	for name, status := range statuses() {
		t.Run(name, func(t *testing.T) {
			snap := snapshot("demo")
			snap.Status = status
			obj := toMap(t, snap)
			want := toMap(t, snap)
			if errs := s.create(t, obj); len(errs) > 0 {
				t.Fatalf("rejected:\n%s", errs.ToAggregate())
			}
			check(t, obj, want)
		})
	}
}

func TestInvalidSnapshotsAreRejected(t *testing.T) {
	s := loadCRD(t)
	tests := []struct {
		name    string
		mutate  func(m map[string]any)
		wantErr string
	}{{
		name:    "no spec",
		mutate:  func(m map[string]any) { delete(m, "spec") },
		wantErr: "spec: Required value",
	}, {
		name:    "no sandboxName",
		mutate:  func(m map[string]any) { delete(m["spec"].(map[string]any), "sandboxName") },
		wantErr: "spec.sandboxName: Required value",
	}, {
		name:    "sandboxName not a string",
		mutate:  func(m map[string]any) { m["spec"].(map[string]any)["sandboxName"] = int64(3) },
		wantErr: "spec.sandboxName: Invalid value",
	}, {
		name:    "unknown phase",
		mutate:  func(m map[string]any) { m["status"] = map[string]any{"phase": "Succeeded"} },
		wantErr: "status.phase: Unsupported value",
	}, {
		name: "container without image",
		mutate: func(m map[string]any) {
			m["status"] = map[string]any{"containers": []any{map[string]any{"containerName": "app"}}}
		},
		wantErr: "status.containers[0].imageUri: Required value",
	}, {
		name: "taskRunRef without name",
		mutate: func(m map[string]any) {
			m["status"] = map[string]any{"taskRunRef": map[string]any{"namespace": "sandbox-snapshot-system"}}
		},
		wantErr: "status.taskRunRef.name: Required value",
	}, {
		name:    "startTime not a time",
		mutate:  func(m map[string]any) { m["status"] = map[string]any{"startTime": "yesterday"} },
		wantErr: "status.startTime: Invalid value",
	}, {
		name: "pauseWindowMilliseconds not an integer",
		mutate: func(m map[string]any) {
			m["status"] = map[string]any{"pauseWindowMilliseconds": "812ms"}
		},
		wantErr: "status.pauseWindowMilliseconds: Invalid value",
	}, {
		name: "duplicate condition type",
		mutate: func(m map[string]any) {
			c := map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-03-01T12:00:00Z"}
			m["status"] = map[string]any{"conditions": []any{c, c}}
		},
		wantErr: "status.conditions[1]: Duplicate value",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := toMap(t, snapshot("demo"))
			tc.mutate(obj)
			errs := s.create(t, obj)
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error containing %q", tc.wantErr)
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tc.wantErr) {
				t.Errorf("errors = %s\nwant one containing %q", got, tc.wantErr)
			}
		})
	}
}

// TestSandboxNameMatchesGoValidation checks that the schema accepts exactly
// the names SandboxSnapshotSpec.Validate accepts, and names the field.
func TestSandboxNameMatchesGoValidation(t *testing.T) {
	s := loadCRD(t)
	label := strings.Repeat("a", 63)
	longest := strings.Join([]string{label, label, label, strings.Repeat("b", 61)}, ".") // 253 characters
	for _, name := range []string{
		"demo", "demo-1", "a", "0", "a.b-c.d", "sandbox.team-a", longest,
		"", "Demo", "DEMO", "demo_1", "-demo", "demo-", ".demo", "demo..x", "demo.", "de mo", "démo",
		longest + "c", strings.Repeat("x", 300),
	} {
		t.Run(name, func(t *testing.T) {
			goErr := (&v1alpha1.SandboxSnapshotSpec{SandboxName: name}).Validate(context.Background())
			errs := s.create(t, toMap(t, snapshot(name)))
			switch {
			case goErr == nil && len(errs) > 0:
				t.Errorf("the schema rejects a name the Go validation accepts:\n%s", errs.ToAggregate())
			case goErr != nil && len(errs) == 0:
				t.Errorf("the schema accepts a name the Go validation rejects: %v", goErr)
			case goErr != nil && !strings.Contains(errs.ToAggregate().Error(), "spec.sandboxName"):
				t.Errorf("the errors do not name spec.sandboxName: %s", errs.ToAggregate())
			}
		})
	}
}

func TestPruningDropsUnknownFields(t *testing.T) {
	s := loadCRD(t)
	snap := snapshot("demo")
	snap.Labels = map[string]string{"team": "a"}
	snap.Status = statuses()["failed"]
	obj := toMap(t, snap)
	want := toMap(t, snap)

	obj["extra"] = "x"
	obj["spec"].(map[string]any)["sandboxID"] = "sb-1"
	status := obj["status"].(map[string]any)
	status["message"] = "x"
	status["containers"].([]any)[1].(map[string]any)["imageID"] = "x"
	status["conditions"].([]any)[0].(map[string]any)["severity"] = "Error"
	status["taskRunRef"].(map[string]any)["uid"] = "x"
	status["thaw"].(map[string]any)["taskRunRef"].(map[string]any)["kind"] = "TaskRun"

	pruned := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	wantPruned := []string{
		"extra",
		"spec.sandboxID",
		"status.conditions[0].severity",
		"status.containers[1].imageID",
		"status.message",
		"status.taskRunRef.uid",
		"status.thaw.taskRunRef.kind",
	}
	if !reflect.DeepEqual(pruned, wantPruned) {
		t.Errorf("pruned %v, want %v", pruned, wantPruned)
	}
	if !reflect.DeepEqual(obj, want) {
		t.Errorf("after pruning:\n got %v\nwant %v", obj, want)
	}
}

func TestSpecIsImmutable(t *testing.T) {
	s := loadCRD(t)
	old := snapshot("demo")
	old.ResourceVersion = "1"
	oldObj := toMap(t, old)

	changed := old.DeepCopy()
	changed.Spec.SandboxName = "other"
	errs := s.update(t, toMap(t, changed), oldObj)
	if len(errs) == 0 {
		t.Fatal("a changed spec.sandboxName was accepted")
	}
	if got := errs.ToAggregate().Error(); !strings.Contains(got, "spec is immutable; delete and recreate the SandboxSnapshot") ||
		!strings.HasPrefix(got, "spec: Forbidden") {
		t.Errorf("errors = %s, want spec: Forbidden: spec is immutable; ...", got)
	}

	// Status, labels, annotations and finalizers stay writable.
	same := old.DeepCopy()
	same.Labels = map[string]string{"x": "y"}
	same.Finalizers = []string{sandbox.GroupName + "/taskrun-cleanup"}
	same.Status = statuses()["succeeded"]
	if errs := s.update(t, toMap(t, same), oldObj); len(errs) > 0 {
		t.Errorf("an update that keeps the spec was rejected:\n%s", errs.ToAggregate())
	}
}

// TestSchemaMatchesGoTypes walks SandboxSnapshot's Go type and the schema
// side by side: every json field must have a property of the matching type,
// every property a field, and exactly the fields without omitempty must be
// required.
func TestSchemaMatchesGoTypes(t *testing.T) {
	s := loadCRD(t)
	compareType(t, "", reflect.TypeFor[v1alpha1.SandboxSnapshot](), s.structural)

	// Spot checks that the walk really covers the status, so that an empty
	// walk cannot pass.
	if _, ok := s.structural.Properties["status"].Properties["thaw"].Properties["state"]; !ok {
		t.Error("status.thaw.state is missing")
	}
	var want []string
	for _, p := range []v1alpha1.SandboxSnapshotPhase{v1alpha1.PhasePending, v1alpha1.PhaseCommitting, v1alpha1.PhaseSucceed, v1alpha1.PhaseFailed} {
		want = append(want, string(p))
	}
	var got []string
	if vv := s.structural.Properties["status"].Properties["phase"].ValueValidation; vv != nil {
		for _, e := range vv.Enum {
			got = append(got, e.Object.(string))
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("status.phase enum = %v, want %v", got, want)
	}
}

var (
	timeType       = reflect.TypeFor[metav1.Time]()
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
)

// compareType checks the schema s at path against the Go type typ.
func compareType(t *testing.T, path string, typ reflect.Type, s *structuralschema.Structural) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	wantType, wantFormat := "", ""
	switch {
	case typ == timeType:
		wantType, wantFormat = "string", "date-time"
	case typ == objectMetaType:
		// The API server owns metadata's schema.
		if s.Type != "object" {
			t.Errorf("%s: type %q, want object", path, s.Type)
		}
		return
	case typ.Kind() == reflect.String:
		wantType = "string"
	case typ.Kind() == reflect.Bool:
		wantType = "boolean"
	case typ.Kind() == reflect.Int64:
		wantType, wantFormat = "integer", "int64"
	case typ.Kind() == reflect.Int32:
		wantType, wantFormat = "integer", "int32"
	case typ.Kind() == reflect.Slice:
		wantType = "array"
	case typ.Kind() == reflect.Struct:
		wantType = "object"
	default:
		t.Errorf("%s: Go type %v has no schema mapping in this test", path, typ)
		return
	}
	if s.Type != wantType {
		t.Errorf("%s: type %q, want %q (Go %v)", path, s.Type, wantType, typ)
	}
	if format := valueFormat(s); format != wantFormat {
		t.Errorf("%s: format %q, want %q (Go %v)", path, format, wantFormat, typ)
	}

	switch wantType {
	case "array":
		if s.Items == nil {
			t.Errorf("%s: array without items", path)
			return
		}
		compareType(t, path+"[]", typ.Elem(), s.Items)
	case "object":
		if typ == timeType {
			return
		}
		fields := map[string]reflect.StructField{}
		var required []string
		collectFields(typ, fields, &required)
		for name, f := range fields {
			p, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s: the schema lacks Go field %s (json %q)", path, f.Name, name)
				continue
			}
			compareType(t, path+"."+name, f.Type, &p)
		}
		for name := range s.Properties {
			if _, ok := fields[name]; !ok {
				t.Errorf("%s: the schema has property %q that %v lacks", path, name, typ)
			}
		}
		var gotRequired []string
		if s.ValueValidation != nil {
			gotRequired = append(gotRequired, s.ValueValidation.Required...)
		}
		sort.Strings(gotRequired)
		sort.Strings(required)
		if !reflect.DeepEqual(gotRequired, required) {
			t.Errorf("%s: required %v, want the fields without omitempty: %v", path, gotRequired, required)
		}
	}
}

// collectFields gathers the json fields of a struct, flattening inlined
// embedded structs, and those without omitempty.
func collectFields(typ reflect.Type, fields map[string]reflect.StructField, required *[]string) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			collectFields(f.Type, fields, required)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
		if !strings.Contains(","+opts+",", ",omitempty,") {
			*required = append(*required, name)
		}
	}
}

func valueFormat(s *structuralschema.Structural) string {
	if s.ValueValidation == nil {
		return ""
	}
	return s.ValueValidation.Format
}
