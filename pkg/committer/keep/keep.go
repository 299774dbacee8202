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

// Package keep keeps pushed snapshot images, named by digest, unpacked for a
// resume on their node, within a disk bound, until their snapshot is deleted.
package keep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sort"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
)

const (
	// LabelLocalBytes is an image's unpacked diff plus compressed layer.
	LabelLocalBytes = "sandbox.opensandbox.io/local-bytes"
	// LabelSnapshotter records the snapshotter of the committed container.
	LabelSnapshotter = "sandbox.opensandbox.io/snapshotter"
	// LabelKept marks images kept for a resume; only they are evicted.
	LabelKept = "sandbox.opensandbox.io/kept-for-resume"
	// LabelKeptFor is the run ID (SandboxSnapshot UID) that kept an image.
	LabelKeptFor = "sandbox.opensandbox.io/kept-for-run"
	// LabelReleased marks a kept image in use when its snapshot went.
	LabelReleased = "sandbox.opensandbox.io/released"
)

// defaultSnapshotter unpacks an image that does not name its snapshotter.
const defaultSnapshotter = "overlayfs"

// Unpack unpacks img into its LabelSnapshotter for pods here to start from.
func Unpack(ctx context.Context, c *client.Client, img images.Image) error {
	sn := img.Labels[LabelSnapshotter]
	if sn == "" {
		sn = defaultSnapshotter
	}
	if err := client.NewImage(c, img).Unpack(ctx, sn); err != nil {
		return fmt.Errorf("unpacking into snapshotter %s: %w", sn, err)
	}
	return nil
}

// Store keeps images on one node, within maxBytes.
type Store struct {
	client   *client.Client
	maxBytes int64
	log      *log.Logger
}

// New returns a Store of c's images, bounded by maxBytes.
func New(c *client.Client, maxBytes int64, log *log.Logger) *Store {
	return &Store{client: c, maxBytes: maxBytes, log: log}
}

// Keep renames image working to name, <repository>@<digest> as the CRI plugin
// resolves a pinned imageUri, and marks it kept for runID. Never a tag: the
// node would serve it for another snapshot's, or for the registry's newer one.
func (s *Store) Keep(ctx context.Context, working, name, runID string) error {
	is := s.client.ImageService()
	img, err := is.Get(ctx, working)
	if err != nil {
		return fmt.Errorf("reading committed image: %w", err)
	}
	img.Name = name
	img.Labels[LabelKept] = "true"
	img.Labels[LabelKeptFor] = runID
	img.Labels[cri.LabelImage] = "managed"
	if _, err := is.Create(ctx, img); errdefs.IsAlreadyExists(err) {
		if _, err = is.Update(ctx, img, "target", "labels"); err != nil {
			return fmt.Errorf("naming kept image %s: %w", img.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("naming kept image %s: %w", img.Name, err)
	}
	if err := is.Delete(ctx, working); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("removing working image %s: %w", working, err)
	}
	return nil
}

// keptImage is one kept manifest: its names and what it holds on the node.
type keptImage struct {
	names    []string
	bytes    int64
	created  time.Time
	released bool
	target   ocispec.Descriptor
}

// list lists the kept images matching filters, one per manifest.
func (s *Store) list(ctx context.Context, filters ...string) ([]*keptImage, error) {
	filter := fmt.Sprintf("labels.%q==true", LabelKept)
	for _, f := range filters {
		filter += "," + f
	}
	list, err := s.client.ImageService().List(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("listing kept images: %w", err)
	}
	byTarget := map[digest.Digest]*keptImage{}
	var out []*keptImage
	for _, img := range list {
		k := byTarget[img.Target.Digest]
		if k == nil {
			n, _ := strconv.ParseInt(img.Labels[LabelLocalBytes], 10, 64)
			k = &keptImage{bytes: n, created: img.CreatedAt, target: img.Target}
			byTarget[img.Target.Digest] = k
			out = append(out, k)
		}
		k.names = append(k.names, img.Name)
		k.released = k.released || img.Labels[LabelReleased] == "true"
		if img.CreatedAt.Before(k.created) {
			k.created = img.CreatedAt
		}
	}
	return out, nil
}

// imagesInUse holds the image names and CRI image IDs containers run from: a
// container pins only its snapshots, not the manifest and config commits need.
type imagesInUse struct {
	names   map[string]bool
	configs map[digest.Digest]bool
}

func (s *Store) imagesInUse(ctx context.Context) (*imagesInUse, error) {
	list, err := s.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	u := &imagesInUse{names: map[string]bool{}, configs: map[digest.Digest]bool{}}
	for _, ctr := range list {
		u.names[ctr.Image] = true
		if id := cri.ImageID(ctr); id != "" {
			u.configs[id] = true
		}
	}
	return u, nil
}

// runsFrom reports whether a container runs from k.
func (u *imagesInUse) runsFrom(ctx context.Context, cs content.Provider, k *keptImage) bool {
	for _, n := range k.names {
		if u.names[n] {
			return true
		}
	}
	raw, err := content.ReadBlob(ctx, cs, k.target)
	if err != nil {
		return false
	}
	var m ocispec.Manifest
	return json.Unmarshal(raw, &m) == nil && u.configs[m.Config.Digest]
}

// delete removes every name of k.
func (s *Store) delete(ctx context.Context, k *keptImage) error {
	for _, n := range k.names {
		if err := s.client.ImageService().Delete(ctx, n); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("removing kept image %s: %w", n, err)
		}
	}
	return nil
}

// Evict removes kept images no container runs from: released ones, then the
// oldest until within the bound.
func (s *Store) Evict(ctx context.Context) error {
	kept, err := s.list(ctx)
	if err != nil {
		return err
	}
	used, err := s.imagesInUse(ctx)
	if err != nil {
		return err
	}
	cs := s.client.ContentStore()
	var total int64
	var idle []*keptImage
	for _, k := range kept {
		total += k.bytes
		if !used.runsFrom(ctx, cs, k) {
			idle = append(idle, k)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		if idle[i].released != idle[j].released {
			return idle[i].released
		}
		return idle[i].created.Before(idle[j].created)
	})
	for _, k := range idle {
		if !k.released && total <= s.maxBytes {
			break
		}
		if err := s.delete(ctx, k); err != nil {
			return err
		}
		total -= k.bytes
		why := "to stay within"
		if k.released {
			why = "(snapshot deleted); bound"
		}
		s.log.Printf("evicted kept images %v (%d bytes) %s %d bytes", k.names, k.bytes, why, s.maxBytes)
	}
	if total > s.maxBytes {
		s.log.Printf("kept images hold %d bytes, over the bound of %d: the rest are in use by containers on this node", total, s.maxBytes)
	}
	return nil
}

// Release gives back what runID kept: unused images are removed, those in use
// marked LabelReleased for Evict. It returns how many it removed and marked.
func (s *Store) Release(ctx context.Context, runID string) (removed, marked int, err error) {
	kept, err := s.list(ctx, fmt.Sprintf("labels.%q==%q", LabelKeptFor, runID))
	if err != nil || len(kept) == 0 {
		return 0, 0, err
	}
	used, err := s.imagesInUse(ctx)
	if err != nil {
		return 0, 0, err
	}
	is := s.client.ImageService()
	var errs []error
	for _, k := range kept {
		if !used.runsFrom(ctx, s.client.ContentStore(), k) {
			if err := s.delete(ctx, k); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
			s.log.Printf("removed kept images %v of the deleted snapshot", k.names)
			continue
		}
		for _, n := range k.names {
			img, err := is.Get(ctx, n)
			if err == nil {
				img.Labels[LabelReleased] = "true"
				_, err = is.Update(ctx, img, "labels."+LabelReleased)
			}
			if err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("marking kept image %s released: %w", n, err))
			}
		}
		marked++
		s.log.Printf("kept images %v of the deleted snapshot are in use on this node: marked %s, removed once unused", k.names, LabelReleased)
	}
	return removed, marked, errors.Join(errs...)
}
