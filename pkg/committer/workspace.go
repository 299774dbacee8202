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
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// workspace is what a run leaves between its steps, removed on every path that
// ends it: each target's image under its working name, layer files in LayerDir
// and, of a memory snapshot, a checkpoint archive and its record.
type workspace struct {
	client  *client.Client
	runID   string
	layers  *layerdir.Dir
	records checkpoint.Records
	pod     string
	log     *log.Logger

	// owned are the archives this process writes or pushes (discard).
	mu    sync.Mutex
	owned []ownedArchive
}

type ownedArchive struct {
	target task.Target
	rec    *checkpoint.Record
}

// WorkingName is t's image name in containerd between run runID's two steps,
// <repository>:commit-<run ID>. It is per run, so that no step reads an image
// another run committed to the same tag.
func WorkingName(t task.Target, runID string) string {
	return t.Repository() + ":commit-" + runID
}

func (w *workspace) name(t task.Target) string {
	return WorkingName(t, w.runID)
}

// saveImage writes manifest m and names it t's working name, with labels.
func (w *workspace) saveImage(ctx context.Context, t task.Target, m ocispec.Manifest, labels map[string]string) (ocispec.Descriptor, []byte, error) {
	desc, raw, err := oci.WriteManifest(ctx, w.client.ContentStore(), m)
	if err != nil {
		return desc, nil, err
	}
	img := images.Image{Name: w.name(t), Target: desc, Labels: labels}
	is := w.client.ImageService()
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return desc, nil, fmt.Errorf("creating image record: %w", err)
		}
		if _, err := is.Update(ctx, img, "target", "labels"); err != nil {
			return desc, nil, fmt.Errorf("updating image record: %w", err)
		}
	}
	return desc, raw, nil
}

// removeImages deletes the working images of targets from containerd.
func (w *workspace) removeImages(ctx context.Context, targets ...task.Target) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, t := range targets {
		if err := w.client.ImageService().Delete(ctx, w.name(t)); err != nil && !errdefs.IsNotFound(err) {
			w.log.Printf("pod %s container %q: removing image %s: %v", w.pod, t.Container, w.name(t), err)
		}
	}
}

func (w *workspace) removeLayerFiles(layers ...ocispec.Descriptor) {
	if err := w.layers.Remove(layers...); err != nil {
		w.log.Printf("pod %s: %v", w.pod, err)
	}
}

// own records rec, t's archive, for discard.
func (w *workspace) own(t task.Target, rec *checkpoint.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.owned = append(w.owned, ownedArchive{t, rec})
}

// removeCheckpoint removes t's checkpoint archive and its record.
func (w *workspace) removeCheckpoint(t task.Target, rec *checkpoint.Record) {
	if err := w.records.Remove(t.Container, rec); err != nil {
		w.log.Printf("pod %s container %q: %v", w.pod, t.Container, err)
	}
}

// discard removes the archives this process owns, and returns how many were
// still there.
func (w *workspace) discard() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.owned {
		if _, err := os.Lstat(w.records.ArchiveDir(o.rec)); err == nil {
			n++
		}
		w.removeCheckpoint(o.target, o.rec)
	}
	w.owned = nil
	return n
}
