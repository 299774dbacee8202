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

// Package committer runs the sandbox-commit Task's two steps on a node: the
// commit step freezes a pod's containers, takes their filesystem change (or
// CRIU's dump) and thaws them; the push step uploads the images. The packages
// below do the work; this one orders it.
package committer

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/overlay"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/push"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

// Committer runs the commit and push steps of one pod's snapshot.
type Committer struct {
	cfg    Config
	client *client.Client
	log    *log.Logger
	pod    string
	frz    *freeze.Freezer
	differ *overlay.Differ
	dumper *checkpoint.Dumper
	keeper *keep.Store
	ws     *workspace
	room   *room
}

// New returns a Committer using an existing containerd client.
func New(c *client.Client, cfg Config) *Committer {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Keychain == nil {
		cfg.Keychain = authn.NewMultiKeychain()
	}
	w := cfg.Log
	if w == nil {
		w = os.Stderr
	}
	lg := log.New(w, "", log.LstdFlags|log.Lmicroseconds)
	p := cfg.Params
	pod := freeze.Pod{Name: p.PodName, Namespace: p.PodNamespace, UID: p.PodUID}
	maxPause := p.MaxPause
	if maxPause == 0 {
		maxPause = task.DefaultMaxPause
	}
	ref := pod.String()
	cm := &Committer{
		cfg:    cfg,
		client: c,
		log:    lg,
		pod:    ref,
		frz:    freeze.New(c, pod, freeze.Options{Namespace: cfg.Namespace, RunID: p.RunID, MaxPause: maxPause, Log: lg}),
		differ: overlay.New(c, cfg.CopyDir, ref, lg),
		dumper: checkpoint.New(c, ref, lg),
		keeper: keep.New(c, p.KeepLocalMaxBytes, lg),
		ws: &workspace{
			client:  c,
			runID:   p.RunID,
			layers:  layerdir.New(cfg.LayerDir, c.ContentStore()),
			records: checkpoint.Records{LayerDir: cfg.LayerDir, CheckpointDir: cfg.CheckpointDir},
			pod:     ref,
			log:     lg,
		},
	}
	cm.room = &room{cfg: &cm.cfg, client: c, scratch: scratchDir(cfg), pod: ref, log: lg}
	return cm
}

// scratchDir is where a squash stages contents.
func scratchDir(cfg Config) string {
	for _, d := range []string{cfg.LayerDir, cfg.CopyDir} {
		if d != "" {
			return d
		}
	}
	return os.TempDir()
}

func (c *Committer) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, c.cfg.Namespace)
}

// Abort, for a signal handler, thaws everything this process paused
// (freeze.Freezer.Abort).
func (c *Committer) Abort(timeout time.Duration) (int, error) {
	return c.frz.Abort(timeout)
}

// Unpause implements mode=unpause (freeze.Freezer.Unpause).
func (c *Committer) Unpause(ctx context.Context) (int, error) {
	return c.frz.Unpause(c.nsCtx(ctx))
}

// Release implements mode=release (keep.Store.Release).
func (c *Committer) Release(ctx context.Context) (removed, marked int, err error) {
	return c.keeper.Release(c.nsCtx(ctx), c.cfg.Params.RunID)
}

// remoteOptions are the options of this run's registry requests.
func (c *Committer) remoteOptions(ctx context.Context) []remote.Option {
	return append([]remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(c.cfg.Keychain),
		remote.WithJobs(push.Concurrency),
	}, upload.RemoteOptions(c.cfg.Params.Insecure, c.cfg.RootCAs)...)
}
