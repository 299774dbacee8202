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

package checkpoint

import (
	"maps"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestCheckpointRecord checks the record the commit step leaves the push
// step of a memory snapshot: it reads back as written, a container without
// one has none, and a record that names anything but a directory of the
// checkpoint directory, or a push step without one, is refused.
func TestCheckpointRecord(t *testing.T) {
	layers, checkpoints := t.TempDir(), t.TempDir()
	r := Records{LayerDir: layers, CheckpointDir: checkpoints}
	const app = "app"
	want := &Record{Archive: "run-1-app", MediaType: ocispec.MediaTypeImageLayer, Created: time.Unix(1700000000, 0).UTC(),
		CreatedBy: "sandbox-checkpoint pod ns/p container app", Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"c": "d"}}
	if err := r.Write(app, want); err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(app)
	if err != nil || got == nil || got.Archive != want.Archive || got.MediaType != want.MediaType || !got.Created.Equal(want.Created) ||
		got.CreatedBy != want.CreatedBy || !maps.Equal(got.Annotations, want.Annotations) || !maps.Equal(got.Labels, want.Labels) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	if got, err := r.Read("sidecar"); got != nil || err != nil {
		t.Errorf("a container without a record reads as %+v, %v; want none", got, err)
	}
	for _, archive := range []string{"", ".", "..", "../etc", "a/b", "/var/lib"} {
		if err := r.Write(app, &Record{Archive: archive}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(app); err == nil || !strings.Contains(err.Error(), checkpoints) {
			t.Errorf("archive %q: got %v, want a refusal naming %s", archive, err, checkpoints)
		}
	}
	if err := r.Write(app, want); err != nil {
		t.Fatal(err)
	}
	r.CheckpointDir = ""
	if _, err := r.Read(app); err == nil || !strings.Contains(err.Error(), "no checkpoint directory") {
		t.Errorf("without a checkpoint directory: got %v, want a refusal", err)
	}
}
