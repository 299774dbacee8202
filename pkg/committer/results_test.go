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

package committer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

func TestFormatResults(t *testing.T) {
	p := []Pushed{
		{Target: mustTarget(t, "app=127.0.0.1:5000/snap/sb1-app:gen3"), Digest: "sha256:" + strings.Repeat("a", 64)},
		{Target: mustTarget(t, "side=127.0.0.1:5000/snap/sb1-side:gen3"), Digest: "sha256:" + strings.Repeat("b", 64)},
	}
	if got, want := FormatDigests(p), "sha256:"+strings.Repeat("a", 64)+",sha256:"+strings.Repeat("b", 64); got != want {
		t.Errorf("DIGESTS = %q", got)
	}
	want := "127.0.0.1:5000/snap/sb1-app@sha256:" + strings.Repeat("a", 64) + "\n127.0.0.1:5000/snap/sb1-side@sha256:" + strings.Repeat("b", 64)
	if got := FormatImages(p); got != want {
		t.Errorf("IMAGES = %q", got)
	}
	if FormatPauseWindow(1234) != "1234" {
		t.Error("PAUSE_WINDOW_MS")
	}
	dir := t.TempDir()
	if err := WriteResult(filepath.Join(dir, "DIGESTS"), "x"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "DIGESTS")); string(b) != "x" {
		t.Errorf("file holds %q", b)
	}
	if err := WriteResult("", "x"); err != nil {
		t.Error(err)
	}
}

// TestResultsFitTerminationBudget checks a realistic worst case: ten
// containers with long registry and repository names still fit, with all
// three results, in the 4096-byte termination message.
func TestResultsFitTerminationBudget(t *testing.T) {
	var p []Pushed
	for i := 0; i < 10; i++ {
		img := fmt.Sprintf("c%d=registry.internal.example.com:5000/sandbox-snapshots/team-analytics/batch-sandbox-0123456789-c%d:snap-gen123", i, i)
		p = append(p, Pushed{Target: mustTarget(t, img), Digest: "sha256:" + strings.Repeat("f", 64)})
	}
	size := terminationSize(map[string]string{
		task.ResultDigests:       FormatDigests(p),
		task.ResultImages:        FormatImages(p),
		task.ResultPauseWindowMS: FormatPauseWindow(123456),
	})
	t.Logf("termination message for 10 containers: %d bytes", size)
	if size > terminationMessageBudget {
		t.Fatalf("results take %d bytes, budget %d", size, terminationMessageBudget)
	}
}

// terminationMessageBudget is the size Kubernetes allows for a termination
// message, which is where Tekton stores step results.
const terminationMessageBudget = 4096

// terminationSize is the size of the termination message Tekton writes for
// results: one JSON entry per result.
func terminationSize(results map[string]string) int {
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
		Type  int    `json:"type"`
	}
	entries := make([]entry, 0, len(results))
	for k, v := range results {
		entries = append(entries, entry{Key: k, Value: v, Type: 1})
	}
	b, _ := json.Marshal(entries)
	return len(b)
}

func mustTarget(t *testing.T, s string) task.Target {
	t.Helper()
	tg, err := task.ParseTarget(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}
