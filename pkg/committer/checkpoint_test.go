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
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestDiscard removes the archives, and their records, that a process
// wrote or read, once, and nothing else in the checkpoint directory.
func TestDiscard(t *testing.T) {
	layers, checkpoints := t.TempDir(), t.TempDir()
	ws := &workspace{records: checkpoint.Records{LayerDir: layers, CheckpointDir: checkpoints}, pod: "ns/p", log: log.New(io.Discard, "", 0)}
	other := filepath.Join(checkpoints, checkpoint.ArchiveName("pod-b", "run-b", "app"))
	var owned []string
	for _, name := range []string{"app", "sidecar"} {
		rec := &checkpoint.Record{Archive: checkpoint.ArchiveName("pod-a", "run-a", name)}
		if err := os.MkdirAll(filepath.Join(ws.records.ArchiveDir(rec), "checkpoint"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := ws.records.Write(name, rec); err != nil {
			t.Fatal(err)
		}
		ws.own(task.Target{Container: name}, rec)
		owned = append(owned, ws.records.ArchiveDir(rec), ws.records.Path(name))
	}
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if n := ws.discard(); n != 2 {
		t.Errorf("Discard removed %d archives, want 2", n)
	}
	for _, p := range owned {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Discard: %v", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Discard removed another process's archive: %v", err)
	}
	if n := ws.discard(); n != 0 {
		t.Errorf("a second Discard removed %d archives, want 0", n)
	}
}
