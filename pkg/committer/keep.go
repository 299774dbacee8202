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
	"sort"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
)

const (
	// LabelLocalBytes records, on a committed image, the bytes it holds on
	// the node once unpacked: the uncompressed diff plus the compressed layer.
	LabelLocalBytes = "sandbox.opensandbox.io/local-bytes"
	// LabelSnapshotter records the snapshotter of the committed container.
	LabelSnapshotter = "sandbox.opensandbox.io/snapshotter"
	// LabelKept marks images kept, unpacked, for a resume on this node; only
	// they are evicted to honour Config.KeepLocalMaxBytes.
	LabelKept = "sandbox.opensandbox.io/kept-for-resume"
	// labelCRIImage is the label the CRI plugin puts on the images it manages.
	labelCRIImage = "io.cri-containerd.image"
)

// unpackLocal unpacks a committed image into its container's snapshotter, so
// that a pod on this node starts from it without pulling or unpacking.
func (c *Committer) unpackLocal(ctx context.Context, img images.Image) error {
	sn := img.Labels[LabelSnapshotter]
	if sn == "" {
		sn = snapshotterOvl
	}
	if err := client.NewImage(c.client, img).Unpack(ctx, sn); err != nil {
		return fmt.Errorf("unpacking into snapshotter %s: %w", sn, err)
	}
	return nil
}

// keepLocal names each pushed image as a resume pod asks for it (the tag,
// and repository@digest as the CRI plugin records pulls), marks them kept,
// and evicts the oldest kept images beyond the disk bound.
func (c *Committer) keepLocal(ctx context.Context, pushed []Pushed) error {
	is := c.client.ImageService()
	for _, p := range pushed {
		img, err := is.Get(ctx, p.Target.Image)
		if err != nil {
			return fmt.Errorf("pod %s container %q: reading committed image: %w", c.podRef(), p.Target.Container, err)
		}
		img.Labels[LabelKept] = "true"
		img.Labels[labelCRIImage] = "managed"
		if _, err := is.Update(ctx, img, "labels"); err != nil {
			return fmt.Errorf("pod %s container %q: labelling kept image: %w", c.podRef(), p.Target.Container, err)
		}
		byDigest := img
		byDigest.Name = p.Target.Repository() + "@" + p.Digest
		if _, err := is.Create(ctx, byDigest); errdefs.IsAlreadyExists(err) {
			_, err = is.Update(ctx, byDigest, "target", "labels")
			if err != nil {
				return fmt.Errorf("pod %s container %q: naming kept image %s: %w", c.podRef(), p.Target.Container, byDigest.Name, err)
			}
		} else if err != nil {
			return fmt.Errorf("pod %s container %q: naming kept image %s: %w", c.podRef(), p.Target.Container, byDigest.Name, err)
		}
		c.log.Printf("pod %s container %q: kept %s and %s in containerd for a resume on this node",
			c.podRef(), p.Target.Container, p.Target.Image, byDigest.Name)
	}
	return c.evictKept(ctx)
}

// evictKept deletes kept images, oldest first, until the bytes they hold on
// the node are within Config.KeepLocalMaxBytes.
func (c *Committer) evictKept(ctx context.Context) error {
	is := c.client.ImageService()
	list, err := is.List(ctx, fmt.Sprintf("labels.%q==true", LabelKept))
	if err != nil {
		return fmt.Errorf("listing kept images: %w", err)
	}
	type group struct {
		names   []string
		bytes   int64
		created time.Time
	}
	groups := map[string]*group{}
	for _, img := range list {
		g := groups[img.Target.Digest.String()]
		if g == nil {
			n, _ := strconv.ParseInt(img.Labels[LabelLocalBytes], 10, 64)
			g = &group{bytes: n, created: img.CreatedAt}
			groups[img.Target.Digest.String()] = g
		}
		g.names = append(g.names, img.Name)
		if img.CreatedAt.Before(g.created) {
			g.created = img.CreatedAt
		}
	}
	ordered := make([]*group, 0, len(groups))
	var total int64
	for _, g := range groups {
		ordered = append(ordered, g)
		total += g.bytes
	}
	sort.Slice(ordered, func(i, j int) bool { return ordered[i].created.Before(ordered[j].created) })
	for _, g := range ordered {
		if total <= c.cfg.KeepLocalMaxBytes {
			break
		}
		for _, n := range g.names {
			if err := is.Delete(ctx, n); err != nil && !errdefs.IsNotFound(err) {
				return fmt.Errorf("evicting kept image %s: %w", n, err)
			}
		}
		total -= g.bytes
		c.log.Printf("evicted kept images %v (%d bytes) to stay within %d bytes", g.names, g.bytes, c.cfg.KeepLocalMaxBytes)
	}
	return nil
}
