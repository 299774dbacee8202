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
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
)

// PatchSnapshotConfig merges patch into config-snapshot (a nil value
// removes its key) and returns the ConfigMap's new resourceVersion, and a
// func that restores the previous values and returns the resourceVersion
// after that; it does so once, however often it is called (then returning
// ""). The caller registers it to run when the test ends.
func PatchSnapshotConfig(t *testing.T, c *Clients, patch map[string]any) (version string, restore func() string) {
	t.Helper()
	cms := c.Kube.CoreV1().ConfigMaps(SystemNamespace)
	apply := func(data map[string]any) (string, error) {
		b, _ := json.Marshal(map[string]any{"data": data})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cm, err := cms.Patch(ctx, config.SnapshotConfigName, types.MergePatchType, b, metav1.PatchOptions{})
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	}
	cm, err := cms.Get(t.Context(), config.SnapshotConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	undo := map[string]any{}
	for k := range patch {
		if v, ok := cm.Data[k]; ok {
			undo[k] = v
		} else {
			undo[k] = nil
		}
	}
	version, err = apply(patch)
	if err != nil {
		t.Fatalf("patching %s: %v", config.SnapshotConfigName, err)
	}
	t.Logf("%s patched with %v (resourceVersion %s)", config.SnapshotConfigName, patch, version)
	done := false
	return version, func() string {
		if done {
			return ""
		}
		done = true
		v, err := apply(undo)
		if err != nil {
			t.Errorf("restoring %s: %v", config.SnapshotConfigName, err)
		}
		return v
	}
}
