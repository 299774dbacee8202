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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Record tells the push step about one container's memory snapshot.
type Record struct {
	// Archive is the archive's directory, in the checkpoint directory.
	Archive string `json:"archive"`
	// MediaType is the layer's, from LayerType.
	MediaType string `json:"mediaType"`
	// Created is when the containers were frozen.
	Created time.Time `json:"created"`
	// CreatedBy is the image history's entry.
	CreatedBy string `json:"createdBy"`
	// Annotations are the manifest's: those containerd's CRI restores by.
	Annotations map[string]string `json:"annotations"`
	// Labels are the containerd image record's.
	Labels map[string]string `json:"labels"`
}

// Records locates a run's records (LayerDir) and archives (CheckpointDir).
type Records struct {
	LayerDir      string
	CheckpointDir string
}

// Path is the file of container's record.
func (r Records) Path(container string) string {
	return filepath.Join(r.LayerDir, "checkpoint-"+container+".json")
}

// Write leaves rec for the push step of container.
func (r Records) Write(container string, rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(r.Path(container), b, 0o600)
}

// Read returns container's record, or nil if the commit step took no snapshot.
func (r Records) Read(container string) (*Record, error) {
	if r.LayerDir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.Path(container))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rec := &Record{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("decoding the commit step's checkpoint record: %w", err)
	}
	if r.CheckpointDir == "" {
		return nil, errors.New("the commit step took a memory snapshot, and this step has no checkpoint directory to read it from")
	}
	if rec.Archive == "" || rec.Archive == "." || rec.Archive == ".." || filepath.Base(rec.Archive) != rec.Archive {
		return nil, fmt.Errorf("the commit step's checkpoint record names archive %q, not a directory of %s", rec.Archive, r.CheckpointDir)
	}
	return rec, nil
}

// ArchiveDir is the directory of rec's archive.
func (r Records) ArchiveDir(rec *Record) string {
	return filepath.Join(r.CheckpointDir, rec.Archive)
}

// Remove removes container's record and the archive of the sandbox's memory.
func (r Records) Remove(container string, rec *Record) error {
	var errs []error
	for _, p := range []string{r.ArchiveDir(rec), r.Path(container)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
