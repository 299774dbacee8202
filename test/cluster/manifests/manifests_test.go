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

package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

func write(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kinds lists the kind and name of each document of a multi-document YAML.
func kinds(t *testing.T, b []byte) []string {
	t.Helper()
	var got []string
	for _, doc := range splitDocs(t, b) {
		var m struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Kind+"/"+m.Metadata.Name)
	}
	return got
}

func splitDocs(t *testing.T, b []byte) [][]byte {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "all.yaml"), string(b))
	docs, err := documents(filepath.Join(dir, "all.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestConfigLeavesOutWhatTheControlPlaneRunsItself checks that Deployments,
// CRDs, samples and kustomization files stay out, and everything else is
// kept in file order, documents without a kind (comments only) dropped.
func TestConfigLeavesOutWhatTheControlPlaneRunsItself(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "config/100-namespace.yaml"), "# the namespace\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns\n")
	write(t, filepath.Join(root, "config/300-crd.yaml"), "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.com\n")
	write(t, filepath.Join(root, "config/400-config.yml"), "# comment only\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: controller\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc\n")
	write(t, filepath.Join(root, "config/kustomization.yaml"), "resources: [100-namespace.yaml]\n")
	write(t, filepath.Join(root, "config/samples/pod.yaml"), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: demo\n")
	out, err := Config(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(t, out), []string{"Namespace/ns", "ConfigMap/cm", "Service/svc"}; !slices.Equal(got, want) {
		t.Errorf("Config kept %v, want %v", got, want)
	}
}

// TestConfigOfThisRepository checks the real config/: its ConfigMaps and RBAC
// go in, the controller's Deployment and the SandboxSnapshot CRD do not.
func TestConfigOfThisRepository(t *testing.T) {
	out, err := Config(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(t, out)
	for _, want := range []string{"ConfigMap/config-snapshot", "ServiceAccount/sandbox-snapshot-controller"} {
		if !slices.Contains(got, want) {
			t.Errorf("Config lacks %s: %v", want, got)
		}
	}
	for _, k := range got {
		if k == "Deployment/sandbox-snapshot-controller" || k == "CustomResourceDefinition/sandboxsnapshots.sandbox.opensandbox.io" {
			t.Errorf("Config kept %s", k)
		}
	}
}

// TestTektonCRDsTurnConversionOff checks that webhook conversion becomes
// strategy None and the rest of each CRD is kept.
func TestTektonCRDsTurnConversionOff(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "300-taskrun.yaml"), `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: taskruns.tekton.dev
spec:
  group: tekton.dev
  names:
    kind: TaskRun
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1beta1"]
      clientConfig:
        service:
          name: tekton-pipelines-webhook
          namespace: tekton-pipelines
`)
	out, err := TektonCRDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	docs := splitDocs(t, out)
	if len(docs) != 1 {
		t.Fatalf("got %d documents, want 1", len(docs))
	}
	var crd struct {
		Spec struct {
			Group      string
			Names      struct{ Kind string }
			Conversion map[string]any
		}
	}
	if err := yaml.Unmarshal(docs[0], &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Conversion) != 1 || crd.Spec.Conversion["strategy"] != "None" {
		t.Errorf("conversion = %v, want only strategy None", crd.Spec.Conversion)
	}
	if crd.Spec.Group != "tekton.dev" || crd.Spec.Names.Kind != "TaskRun" {
		t.Errorf("spec lost its other fields: %+v", crd.Spec)
	}
	if _, err := TektonCRDs(t.TempDir()); err == nil {
		t.Error("TektonCRDs of an empty folder: no error")
	}
}
