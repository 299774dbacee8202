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

package test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// MustParse fills a T from YAML, formatted with args first.
func MustParse[T any](t *testing.T, format string, args ...any) *T {
	t.Helper()
	obj := new(T)
	if err := yaml.UnmarshalStrict([]byte(fmt.Sprintf(format, args...)), obj); err != nil {
		t.Fatalf("parsing %T: %v\n%s", obj, err, fmt.Sprintf(format, args...))
	}
	return obj
}

// MustParseUnstructured parses YAML, formatted with args first, into an
// object for the dynamic client.
func MustParseUnstructured(t *testing.T, format string, args ...any) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(format, args...)), &obj); err != nil {
		t.Fatalf("parsing YAML: %v", err)
	}
	return &unstructured.Unstructured{Object: obj}
}
