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

package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// root is the repository, from this package's directory.
var root = filepath.Join("..", "..")

func mustObjects(t *testing.T, docs ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	var b [][]byte
	for _, d := range docs {
		b = append(b, []byte(d))
	}
	objs, err := Objects(b)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

const configRole = `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: r
  namespace: ns
  labels: {app.kubernetes.io/name: x}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
`

const configDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns}
spec:
  template:
    metadata:
      labels: {app.kubernetes.io/name: x}
    spec:
      containers:
        - name: controller
          image: ko://example.com/cmd/controller
`

const configCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec: {group: example.com}
`

// TestCompareIgnoresOnlyWhatTheChartTemplates checks that Helm's labels, the
// keep annotation and the controller image make no difference, and that
// anything else does.
func TestCompareIgnoresOnlyWhatTheChartTemplates(t *testing.T) {
	config := mustObjects(t, configRole, configDeployment, configCRD)
	labelled := `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: r
  namespace: ns
  labels: {app.kubernetes.io/name: x, helm.sh/chart: c-0.1.0, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/instance: i, app.kubernetes.io/version: "0.1.0"}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
`
	deployment := strings.Replace(configDeployment, "ko://example.com/cmd/controller", "registry.example.com/controller@sha256:0123", 1)
	deployment = strings.Replace(deployment, "labels: {app.kubernetes.io/name: x}", "labels: {app.kubernetes.io/name: x, helm.sh/chart: c-0.1.0}", 1)
	crd := strings.Replace(configCRD, "metadata: {name: things.example.com}",
		"metadata: {name: things.example.com, annotations: {helm.sh/resource-policy: keep}}", 1)
	if d := Compare(mustObjects(t, labelled, deployment, crd), config); len(d) > 0 {
		t.Errorf("Compare found differences in what the chart templates by design:\n%s", strings.Join(d, "\n"))
	}

	for name, tc := range map[string]struct {
		chart []string
		want  string
	}{
		"a verb added": {
			chart: []string{strings.Replace(configRole, `verbs: ["get"]`, `verbs: ["get", "list"]`, 1), configDeployment, configCRD},
			want:  "Role/ns/r differs",
		},
		"another label": {
			chart: []string{strings.Replace(configRole, "app.kubernetes.io/name: x", "app.kubernetes.io/name: y", 1), configDeployment, configCRD},
			want:  "Role/ns/r differs",
		},
		"a container's other field": {
			chart: []string{configRole, strings.Replace(configDeployment, "name: controller", "name: manager", 1), configCRD},
			want:  "Deployment/ns/d differs",
		},
		"another CRD annotation": {
			chart: []string{configRole, configDeployment, strings.Replace(configCRD, "metadata: {name: things.example.com}",
				"metadata: {name: things.example.com, annotations: {a: b}}", 1)},
			want: "CustomResourceDefinition/things.example.com differs",
		},
		"an object missing": {
			chart: []string{configRole, configDeployment},
			want:  "CustomResourceDefinition/things.example.com: in config/, not in the chart",
		},
		"an object more": {
			chart: []string{configRole, configDeployment, configCRD, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra, namespace: ns}\n"},
			want:  "ConfigMap/ns/extra: in the chart, not in config/",
		},
		"another namespace": {
			chart: []string{strings.Replace(configRole, "namespace: ns", "namespace: other", 1), configDeployment, configCRD},
			want:  "Role/ns/r: in config/, not in the chart",
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := Compare(mustObjects(t, tc.chart...), config)
			if !slices.ContainsFunc(d, func(s string) bool { return strings.HasPrefix(s, tc.want) }) {
				t.Errorf("Compare = %q, want a difference starting %q", d, tc.want)
			}
		})
	}
}

// TestEverySnapshotKeyIsAValue checks that the chart's snapshot block (values.yaml)
// and its template's key list name every key config-snapshot documents in
// its _example block, and no other.
func TestEverySnapshotKeyIsAValue(t *testing.T) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "config-snapshot.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	example := map[string]any{}
	if err := yaml.Unmarshal([]byte(cm.Data["_example"]), &example); err != nil {
		t.Fatalf("config-snapshot's _example: %v", err)
	}
	want := sortedKeys(example)

	var values struct {
		Snapshot map[string]any `json:"snapshot"`
	}
	chartDir := filepath.Join(root, "charts", "sandbox-snapshot-operator")
	b, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var fromValues []string
	for name, v := range values.Snapshot {
		fromValues = append(fromValues, KebabCase(name))
		if v != nil {
			t.Errorf("values.yaml: snapshot.%s is %v, want null (the controller's default)", name, v)
		}
	}
	sort.Strings(fromValues)
	if !slices.Equal(fromValues, want) {
		t.Errorf("values.yaml's snapshot block gives the keys\n%q\nconfig-snapshot's _example documents\n%q", fromValues, want)
	}

	b, err = os.ReadFile(filepath.Join(chartDir, "templates", "config-snapshot.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var fromTemplate []string
	for _, m := range regexp.MustCompile(`\(list "([A-Za-z]+)" "([a-z-]+)"\)`).FindAllStringSubmatch(string(b), -1) {
		if KebabCase(m[1]) != m[2] {
			t.Errorf("templates/config-snapshot.yaml maps snapshot.%s to %s, want %s", m[1], m[2], KebabCase(m[1]))
		}
		fromTemplate = append(fromTemplate, m[2])
	}
	sort.Strings(fromTemplate)
	if !slices.Equal(fromTemplate, want) {
		t.Errorf("templates/config-snapshot.yaml writes the keys\n%q\nconfig-snapshot's _example documents\n%q", fromTemplate, want)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
