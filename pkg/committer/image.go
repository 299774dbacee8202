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
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/overlay"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// Labels the committer writes.
const (
	// LabelSourceImage names the image the container was created from.
	LabelSourceImage = "sandbox.opensandbox.io/source-image"
	// LabelSourceRepos lists repositories holding the base layers, for when
	// containerd no longer does.
	LabelSourceRepos = "sandbox.opensandbox.io/source-repositories"
	// LabelCommittedFrom records pod/container on the committed image.
	LabelCommittedFrom = "sandbox.opensandbox.io/committed-from"
)

// What the committer writes into images, and how long a lease holds it.
const (
	historyComment       = "sandbox-snapshot-operator commit"
	leaseExpiration      = time.Hour
	mediaTypeDockerGzip  = images.MediaTypeDockerSchema2LayerGzip
	mediaTypeDockerManif = images.MediaTypeDockerSchema2Manifest
)

// Committed describes one image of the commit step; a memory snapshot's, built
// by the push step, has no Manifest and only Layer's media type.
type Committed struct {
	Target task.Target
	// Manifest is the descriptor of the new manifest in containerd.
	Manifest ocispec.Descriptor
	// DiffSize is the uncompressed diff's size, or the archive's.
	DiffSize int64
	// Layer is the descriptor of the new compressed layer.
	Layer ocispec.Descriptor
}

// CommitResult is what the commit step produced.
type CommitResult struct {
	Images []Committed
	// PauseWindow is the time from the first pause call to the last resume.
	PauseWindow time.Duration
	// Mode is the snapshot mode taken, filesystem or memory.
	Mode string
}

// prepared holds what is read before the pause, so that the pause only diffs.
type prepared struct {
	live        *freeze.Container
	baseName    string
	manifestMT  string
	manifestDgs digest.Digest
	manifest    ocispec.Manifest
	config      map[string]json.RawMessage
	configMT    string
	sourceRepos []string
	// overlay is set when the overlay differ applies; upper is its result.
	overlay *overlay.Plan
	upper   *overlay.Diff
	// diff is the walking differ's uncompressed layer otherwise.
	diff ocispec.Descriptor
	// selfContained marks a checkpoint of the whole root filesystem.
	selfContained bool
}

// committedImage is what the commit step left for a target: an image or, of a
// memory snapshot, a checkpoint record.
type committedImage struct {
	target   task.Target
	image    images.Image
	raw      []byte
	manifest ocispec.Manifest

	checkpoint *checkpoint.Record
	// uploaded is the layer the push uploaded as it built it.
	uploaded digest.Digest
	// put is the manifest the push may have put in the registry.
	put digest.Digest
}

// ownLayers counts an image's trailing layers from earlier commits
// (historyComment); 0 where its diff IDs are not its layers.
func ownLayers(cfg map[string]json.RawMessage, layers int) int {
	var img struct {
		RootFS  ocispec.RootFS    `json:"rootfs"`
		History []ocispec.History `json:"history"`
	}
	for k, v := range map[string]any{"rootfs": &img.RootFS, "history": &img.History} {
		if raw, ok := cfg[k]; ok {
			if err := json.Unmarshal(raw, v); err != nil {
				return 0
			}
		}
	}
	if len(img.RootFS.DiffIDs) != layers {
		return 0
	}
	n := 0
	for i := len(img.History) - 1; i >= 0 && n < layers; i-- {
		if h := img.History[i]; h.Comment != historyComment || h.EmptyLayer {
			break
		}
		n++
	}
	return n
}

// appendLayerToConfig puts diffID and a history entry in place of cfg's last
// squashed ones, keeping every field it does not know.
func appendLayerToConfig(cfg map[string]json.RawMessage, squashed int, diffID digest.Digest, now time.Time, createdBy string) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(cfg)+3)
	for k, v := range cfg {
		out[k] = v
	}
	var rfs ocispec.RootFS
	if raw, ok := cfg["rootfs"]; ok {
		if err := json.Unmarshal(raw, &rfs); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
	}
	if rfs.Type == "" {
		rfs.Type = "layers"
	}
	var hist []ocispec.History
	if raw, ok := cfg["history"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &hist); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
	}
	if squashed > len(rfs.DiffIDs) || squashed > len(hist) {
		return nil, fmt.Errorf("squashing %d layers of %d, with %d history entries", squashed, len(rfs.DiffIDs), len(hist))
	}
	rfs.DiffIDs = append(rfs.DiffIDs[:len(rfs.DiffIDs)-squashed:len(rfs.DiffIDs)-squashed], diffID)
	hist = append(hist[:len(hist)-squashed:len(hist)-squashed], ocispec.History{Created: &now, CreatedBy: createdBy, Comment: historyComment})
	var err error
	if out["rootfs"], err = json.Marshal(rfs); err != nil {
		return nil, err
	}
	if out["history"], err = json.Marshal(hist); err != nil {
		return nil, err
	}
	if out["created"], err = json.Marshal(now); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}
