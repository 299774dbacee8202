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

// Package chart checks the Helm chart (charts/sandbox-snapshot-operator)
// against config/: rendered with values that match config/, it must give the
// same objects, but for what the chart templates by design.
package chart

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// HelmLabels are the labels the chart adds with helmLabels=true, and
// config/ has none of.
var HelmLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/managed-by",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
}

// KeepAnnotation is the annotation crds.keep puts on the CRD.
const KeepAnnotation = "helm.sh/resource-policy"

// Objects parses YAML documents into objects keyed by Key.
func Objects(docs [][]byte) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	for _, doc := range docs {
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		k := Key(u)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s appears twice", k)
		}
		out[k] = u
	}
	return out, nil
}

// Key names an object: Kind/namespace/name, or Kind/name when cluster-scoped.
func Key(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + "/" + ns + "/" + u.GetName()
	}
	return u.GetKind() + "/" + u.GetName()
}

// Normalize removes from obj, in place, what the chart templates by design:
// the HelmLabels (on the object and a Deployment's pod template), the
// KeepAnnotation of a CRD, and the image of a Deployment's containers (a
// ko:// reference in config/, the release's digest in the chart).
func Normalize(obj *unstructured.Unstructured) {
	dropLabels := func(fields ...string) {
		labels, found, _ := unstructured.NestedStringMap(obj.Object, fields...)
		if !found {
			return
		}
		for _, l := range HelmLabels {
			delete(labels, l)
		}
		_ = unstructured.SetNestedStringMap(obj.Object, labels, fields...)
	}
	dropLabels("metadata", "labels")
	if obj.GetKind() == "CustomResourceDefinition" {
		annotations := obj.GetAnnotations()
		delete(annotations, KeepAnnotation)
		if len(annotations) == 0 {
			annotations = nil
		}
		obj.SetAnnotations(annotations)
	}
	if obj.GetKind() == "Deployment" {
		dropLabels("spec", "template", "metadata", "labels")
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if c, ok := c.(map[string]any); ok {
				delete(c, "image")
			}
		}
		if containers != nil {
			_ = unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
		}
	}
}

// Compare returns how the chart's objects differ from config/'s, one
// message per object, sorted; none when they agree after Normalize.
func Compare(chart, config map[string]*unstructured.Unstructured) []string {
	var diffs []string
	for k, want := range config {
		got, ok := chart[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in config/, not in the chart", k))
			continue
		}
		want, got = want.DeepCopy(), got.DeepCopy()
		Normalize(want)
		Normalize(got)
		if d := cmp.Diff(want.Object, got.Object); d != "" {
			diffs = append(diffs, fmt.Sprintf("%s differs (-config/ +chart):\n%s", k, d))
		}
	}
	for k := range chart {
		if _, ok := config[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in the chart, not in config/", k))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// KebabCase turns a value name of the chart's snapshot block into its
// config-snapshot key: pushSecret becomes push-secret.
func KebabCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('-')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
