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

package localcontroller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEnvOfConfigDeployment(t *testing.T) {
	d, err := ReadDeployment(filepath.Join("..", "..", "..", "config", "500-controller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "sandbox-snapshot-controller" || d.Spec.Template.Spec.ServiceAccountName != "sandbox-snapshot-controller" {
		t.Errorf("read Deployment %s with ServiceAccount %s", d.Name, d.Spec.Template.Spec.ServiceAccountName)
	}
	env, err := Env(d, "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"SYSTEM_NAMESPACE=sandbox-snapshot-system",
		"POD_NAME=pod-1",
		"CONFIG_LOGGING_NAME=config-logging",
		"CONFIG_OBSERVABILITY_NAME=config-observability",
		"CONFIG_LEADERELECTION_NAME=config-leader-election",
		"KUBE_API_QPS=500",
		"KUBE_API_BURST=1000",
		"K_THREADS_PER_CONTROLLER=8",
		"GOMEMLIMIT=536870912",
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
}

func TestEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name, container, env, want string
	}{{
		name:      "no controller container",
		container: "other",
		env:       "[]",
		want:      `no container "controller"`,
	}, {
		name:      "unsupported field",
		container: "controller",
		env:       `[{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]`,
		want:      "env NODE: fieldRef spec.nodeName is not supported",
	}, {
		name:      "no memory limit",
		container: "controller",
		env:       `[{name: GOMEMLIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}]`,
		want:      "env GOMEMLIMIT: container has no memory limit",
	}, {
		name:      "secret",
		container: "controller",
		env:       `[{name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]`,
		want:      "env TOKEN: only value, fieldRef and resourceFieldRef are supported",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.yaml")
			yaml := "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\n---\n" +
				"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\n" +
				"spec: {template: {spec: {containers: [{name: " + tc.container + ", env: " + tc.env + "}]}}}\n"
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := ReadDeployment(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Env(d, "p"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Env error = %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestReadDeploymentNone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: svc}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDeployment(path); err == nil || !strings.Contains(err.Error(), "holds no Deployment") {
		t.Errorf("ReadDeployment error = %v, want no Deployment", err)
	}
}
