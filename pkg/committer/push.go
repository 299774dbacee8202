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
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/push"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

// Push uploads every committed image, checks its manifest digest, then keeps it
// on this node (KeepLocal) or removes it; results follow the containers param.
// A failed push removes the images and, once every upload has stopped, takes
// back what it put in the registry (takeBack).
func (c *Committer) Push(ctx context.Context) ([]Pushed, *push.Stats, error) {
	defer c.room.release()
	ctx = c.nsCtx(ctx)
	pusher, err := push.New(c.client.ContentStore(), c.ws.layers, push.Options{
		Keychain:  c.cfg.Keychain,
		Insecure:  c.cfg.Params.Insecure,
		RootCAs:   c.cfg.RootCAs,
		ChunkSize: c.cfg.ChunkSize,
		Remote:    c.remoteOptions(ctx),
		Pod:       c.pod,
		Log:       c.log,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &pushStep{cfg: &c.cfg, client: c.client, ws: c.ws, keeper: c.keeper, pusher: pusher, pod: c.pod, log: c.log,
		checkpoints: &checkpointImages{client: c.client, ws: c.ws, pusher: pusher, runID: c.cfg.Params.RunID, pod: c.pod, log: c.log}}
	out, err := s.run(ctx)
	return out, pusher.Stats(), err
}

// pushStep is one run of the push step.
type pushStep struct {
	cfg         *Config
	client      *client.Client
	ws          *workspace
	keeper      *keep.Store
	pusher      *push.Pusher
	pod         string
	log         *log.Logger
	checkpoints *checkpointImages
}

// run pushes every committed image and keeps or removes it (Push).
func (s *pushStep) run(ctx context.Context) ([]Pushed, error) {
	committed := make([]*committedImage, len(s.cfg.Params.Targets))
	errs := make([]error, len(committed))
	for i, t := range s.cfg.Params.Targets {
		if committed[i], errs[i] = s.read(ctx, t); errs[i] != nil {
			errs[i] = fmt.Errorf("pod %s container %q -> %s: %w", s.pod, t.Container, t.Image, errs[i])
		}
	}
	defer func() {
		for _, ci := range committed {
			switch {
			case ci == nil:
			case ci.checkpoint != nil:
				s.ws.removeCheckpoint(ci.target, ci.checkpoint)
			default:
				s.ws.removeLayerFiles(ci.manifest.Layers...)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		s.ws.removeImages(ctx, s.cfg.Params.Targets...)
		return nil, err
	}
	// Keeping on this node runs beside the upload; built[i] closes once a
	// memory snapshot's image is built.
	unpacked := make([]chan error, len(s.cfg.Params.Targets))
	built := make([]chan struct{}, len(s.cfg.Params.Targets))
	for i := range built {
		built[i] = make(chan struct{})
	}
	if s.cfg.Params.KeepLocal {
		for i, ci := range committed {
			unpacked[i] = make(chan error, 1)
			go func() {
				var err error
				if ci.checkpoint != nil {
					err = s.checkpoints.ingest(ctx, ci, built[i])
				} else if err = s.ws.layers.Ingest(ctx, ci.manifest); err == nil {
					err = keep.Unpack(ctx, s.client, ci.image)
				}
				unpacked[i] <- err
			}()
		}
	}
	// Containers push concurrently. The first failure cancels the rest with
	// context.Canceled: as a cause, net/http would report it as each cut
	// request's own answer. All are waited for: no upload outlives Push.
	out := make([]Pushed, len(s.cfg.Params.Targets))
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	for i, t := range s.cfg.Params.Targets {
		g.Go(func() error {
			var err error
			ci := committed[i]
			if ci.checkpoint != nil {
				err = s.checkpoints.build(gctx, ci)
			}
			close(built[i])
			var pushed digest.Digest
			if err == nil {
				pushed, ci.put, err = s.pusher.Push(gctx, push.Image{
					Target:    t,
					Raw:       ci.raw,
					Manifest:  ci.manifest,
					MediaType: ci.image.Target.MediaType,
					Sources:   push.SourceRepositories(ci.image.Labels[LabelSourceRepos], s.cfg.Params.Insecure),
					Uploaded:  ci.uploaded,
				})
			}
			if err != nil {
				cancel()
				return fmt.Errorf("pod %s container %q -> %s: %w", s.pod, t.Container, t.Image, err)
			}
			out[i] = Pushed{Target: t, Digest: pushed.String()}
			return nil
		})
	}
	pushErr := g.Wait()
	// An image that could not be unpacked is not kept: the push stands.
	var keep []Pushed
	var drop []task.Target
	for i, ch := range unpacked {
		if ch == nil {
			continue
		}
		if err := <-ch; err != nil {
			s.log.Printf("pod %s container %q: not keeping %s for a resume on this node: %v",
				s.pod, s.cfg.Params.Targets[i].Container, s.cfg.Params.Targets[i].Image, err)
			drop = append(drop, s.cfg.Params.Targets[i])
		} else {
			keep = append(keep, out[i])
		}
	}
	if pushErr != nil {
		s.ws.removeImages(ctx, s.cfg.Params.Targets...)
		return nil, s.takeBack(ctx, committed, pushErr)
	}
	if !s.cfg.Params.KeepLocal {
		s.ws.removeImages(ctx, s.cfg.Params.Targets...)
		return out, nil
	}
	s.ws.removeImages(ctx, drop...)
	if err := s.keepLocal(ctx, keep); err != nil {
		return nil, err
	}
	return out, nil
}

// takeBack deletes the manifests this run may have put in the registry, and
// their tags; it returns err, naming what the registry still holds.
func (s *pushStep) takeBack(ctx context.Context, committed []*committedImage, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	reg := registry.New(s.cfg.Keychain, upload.RemoteOptions(s.cfg.Params.Insecure, s.cfg.RootCAs)...)
	var left []string
	for _, ci := range committed {
		if ci == nil || ci.put == "" {
			continue
		}
		d := ci.target.Tag.Context().Digest(ci.put.String())
		if derr := unpush(ctx, reg, ci.target.Tag, d); derr != nil {
			s.log.Printf("pod %s container %q: the failed push left %s in the registry: %v", s.pod, ci.target.Container, d, derr)
			left = append(left, d.String())
			continue
		}
		s.log.Printf("pod %s container %q: the failed push deleted %s from the registry", s.pod, ci.target.Container, d)
	}
	if len(left) > 0 {
		return fmt.Errorf("%w; the registry still holds what this push put there: %s", err, strings.Join(left, ", "))
	}
	return err
}

// unpush deletes manifest d and, where it still points at d, tag; it fails
// while the registry holds either.
func unpush(ctx context.Context, reg registry.Client, tag name.Tag, d name.Digest) error {
	derr := reg.Delete(ctx, d)
	tagged, err := reg.Digest(ctx, tag)
	if err != nil {
		return err
	}
	if tagged == d.DigestStr() {
		if err := reg.Delete(ctx, tag); err != nil {
			return errors.Join(derr, err)
		}
	}
	if derr != nil {
		// The push may have stopped before the registry took it.
		if held, err := reg.Digest(ctx, d); err != nil || held != "" {
			return derr
		}
	}
	return nil
}

// read reads what the commit step left for t: a checkpoint record or an image.
func (s *pushStep) read(ctx context.Context, t task.Target) (*committedImage, error) {
	rec, err := s.ws.records.Read(t.Container)
	if rec != nil {
		s.ws.own(t, rec)
	}
	if err != nil || rec != nil {
		return &committedImage{target: t, checkpoint: rec}, err
	}
	return s.readCommitted(ctx, t)
}

// readCommitted reads the image this run's commit step committed for t.
func (s *pushStep) readCommitted(ctx context.Context, t task.Target) (*committedImage, error) {
	img, err := s.client.ImageService().Get(ctx, s.ws.name(t))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("no committed image in containerd (did the commit step run?)")
		}
		return nil, fmt.Errorf("reading committed image: %w", err)
	}
	if img.Target.MediaType != ocispec.MediaTypeImageManifest && img.Target.MediaType != images.MediaTypeDockerSchema2Manifest {
		return nil, fmt.Errorf("committed image has unexpected media type %q", img.Target.MediaType)
	}
	ci := &committedImage{target: t, image: img}
	if ci.raw, err = content.ReadBlob(ctx, s.client.ContentStore(), img.Target); err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", img.Target.Digest, err)
	}
	if err := json.Unmarshal(ci.raw, &ci.manifest); err != nil {
		return nil, fmt.Errorf("decoding manifest %s: %w", img.Target.Digest, err)
	}
	return ci, nil
}

// keepLocal keeps each pushed image under its digest (keep.Store.Keep), then
// evicts kept images beyond the disk bound.
func (s *pushStep) keepLocal(ctx context.Context, pushed []Pushed) error {
	for _, p := range pushed {
		name := p.Target.Repository() + "@" + p.Digest
		if err := s.keeper.Keep(ctx, s.ws.name(p.Target), name, s.cfg.Params.RunID); err != nil {
			return fmt.Errorf("pod %s container %q: %w", s.pod, p.Target.Container, err)
		}
		s.log.Printf("pod %s container %q: kept %s in containerd for a resume on this node", s.pod, p.Target.Container, name)
	}
	return s.keeper.Evict(ctx)
}
