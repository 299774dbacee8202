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

// workspace is what one run leaves between its two steps: an image in
// containerd under its working name (name) for each target, layer files
// in Config.LayerDir and, of a memory snapshot, a checkpoint archive and
// its record. It removes each of them on the paths that end the run.
type workspace struct {
	client  *client.Client
	runID   string
	layers  *layerdir.Dir
	records checkpoint.Records
	pod     string
	log     *log.Logger

	// owned are the archives this process is writing or pushing, which
	// discard removes.
	mu    sync.Mutex
	owned []ownedArchive
}

type ownedArchive struct {
	target task.Target
	rec    *checkpoint.Record
}

// name is the name under which the commit step leaves a target's image in
// containerd for the push step: <repository>:commit-<run ID>. Only this
// run writes it, so neither step ever reads an image another run
// committed, where two pods committing to one tag on one node would each
// re-point the tag's record.
func (w *workspace) name(t task.Target) string {
	return t.Repository() + ":commit-" + w.runID
}

// saveImage writes manifest m, whose config is in containerd, and names it
// t's working name, with labels. It returns the manifest's descriptor and
// bytes.
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

// removeImages deletes the working images of targets from containerd; their
// content goes with the run's lease, or with containerd's garbage collector.
func (w *workspace) removeImages(ctx context.Context, targets ...task.Target) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, t := range targets {
		if err := w.client.ImageService().Delete(ctx, w.name(t)); err != nil && !errdefs.IsNotFound(err) {
			w.log.Printf("pod %s container %q: removing image %s: %v", w.pod, t.Container, w.name(t), err)
		}
	}
}

// removeLayerFiles removes the files of layers from Config.LayerDir.
func (w *workspace) removeLayerFiles(layers ...ocispec.Descriptor) {
	if err := w.layers.Remove(layers...); err != nil {
		w.log.Printf("pod %s: %v", w.pod, err)
	}
}

// own records rec, target t's archive, as one this process writes or
// pushes.
func (w *workspace) own(t task.Target, rec *checkpoint.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.owned = append(w.owned, ownedArchive{t, rec})
}

// removeCheckpoint removes the archive of t's memory snapshot and its
// record: they hold the sandbox's memory.
func (w *workspace) removeCheckpoint(t task.Target, rec *checkpoint.Record) {
	if err := w.records.Remove(t.Container, rec); err != nil {
		w.log.Printf("pod %s container %q: %v", w.pod, t.Container, err)
	}
}

// discard removes the archives this process owns and their records, and
// returns how many archives were still there.
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
