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

// Package committer runs the two steps of the sandbox-commit Task on a
// node. The commit step freezes a pod's containers, takes their filesystem
// change (for a memory snapshot, CRIU's dump too) and thaws them; the push
// step uploads the images and keeps them for a resume. The packages below
// it do the work; this one orders it and owns what a run leaves between
// the steps.
package committer

import (
	"context"
	"crypto/x509"
	"io"
	"log"
	"os"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/overlay"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// Labels the committer writes.
const (
	// LabelSourceImage records, on the committed image, the image the
	// container was created from.
	LabelSourceImage = "sandbox.opensandbox.io/source-image"
	// LabelSourceRepos records, on the committed image, the repositories the
	// base layers can be fetched from when containerd no longer holds them.
	LabelSourceRepos = "sandbox.opensandbox.io/source-repositories"
	// LabelCommittedFrom records pod/container on the committed image.
	LabelCommittedFrom = "sandbox.opensandbox.io/committed-from"
)

// DefaultNamespace is the containerd namespace the CRI plugin uses.
const DefaultNamespace = "k8s.io"

// Config configures a Committer.
type Config struct {
	// Params are the validated Task parameters.
	Params *task.Params
	// Namespace is the containerd namespace, DefaultNamespace when empty.
	Namespace string
	// Keychain resolves registry credentials (push only). Anonymous when nil.
	Keychain authn.Keychain
	// MaxPause bounds the time containers stay frozen; 0 means task.DefaultMaxPause.
	MaxPause time.Duration
	// WalkingDiffer forces containerd's walking differ (which compares the
	// whole image) even where the overlay differ applies.
	WalkingDiffer bool
	// CopyDir, when set, is where the overlay differ copies a container's
	// upper directory inside the pause, when that directory is readable here
	// (package stage); otherwise containerd tars it inside the pause.
	CopyDir string
	// LayerDir, when set, receives a file of each new layer in place of a
	// copy in containerd; the push step uploads from it, ingests it into
	// containerd when it keeps the image, and removes it (package layerdir).
	// Both steps must see the same directory.
	LayerDir string
	// ScratchLimit, when not zero, bounds what a commit writes to CopyDir
	// and LayerDir, the commit pod's own disk: its ephemeral-storage limit,
	// past which the kubelet would evict it.
	ScratchLimit uint64
	// RootCAs verify the registry's certificate; the system's when nil.
	RootCAs *x509.CertPool
	// CheckpointDir is where CRIU, through containerd, writes memory snapshots
	// for Checkpoint; containerd and this process must both see it at
	// this path.
	CheckpointDir string
	// MaxLayers bounds the layers a sandbox's commits stack on its base
	// image: a commit on top of MaxLayers of them squashes them and its
	// change into one layer (see squash.go). 0 means no bound.
	MaxLayers int
	// KeepLocal keeps pushed images in containerd, unpacked, for a resume on
	// this node; KeepLocalMaxBytes bounds the uncompressed bytes of all kept
	// snapshot images (oldest evicted first).
	KeepLocal         bool
	KeepLocalMaxBytes int64
	// MemoryRestoreBase, when set, is the image, pinned by digest, that a
	// restore starts a memory snapshot from where it could not pull the
	// container's own base image: the snapshot then holds the container's
	// whole root filesystem (restoreBases).
	MemoryRestoreBase string
	// AllowAnonymousPull lets Checkpoint push to a repository anyone may
	// pull from; otherwise it refuses before the freeze (checkpoint.PrivateTargets).
	AllowAnonymousPull bool
	// ChunkSize is the size of a chunked blob upload's chunks, past which a
	// blob goes in chunks; upload.DefaultChunkSize when 0.
	ChunkSize int
	// InPause, when set, runs while the containers are frozen, before their
	// diffs; its error fails the commit, the containers thawed. Tests use it
	// to act inside the pause.
	InPause func(context.Context, []*freeze.Container) error
	// Log receives progress lines; os.Stderr when nil.
	Log io.Writer
}

// Committer runs the commit and push steps of one pod's snapshot.
type Committer struct {
	cfg    Config
	client *client.Client
	log    *log.Logger
	// pod names the pod in messages.
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
	if cfg.MaxPause == 0 {
		cfg.MaxPause = task.DefaultMaxPause
	}
	if cfg.Keychain == nil {
		cfg.Keychain = authn.NewMultiKeychain()
	}
	w := cfg.Log
	if w == nil {
		w = os.Stderr
	}
	lg := log.New(w, "", log.LstdFlags|log.Lmicroseconds)
	var pod freeze.Pod
	var runID string
	if p := cfg.Params; p != nil {
		pod, runID = freeze.Pod{Name: p.PodName, Namespace: p.PodNamespace, UID: p.PodUID}, p.RunID
	}
	ref := pod.String()
	cm := &Committer{
		cfg:    cfg,
		client: c,
		log:    lg,
		pod:    ref,
		frz:    freeze.New(c, pod, freeze.Options{Namespace: cfg.Namespace, RunID: runID, MaxPause: cfg.MaxPause, Log: lg}),
		differ: overlay.New(c, cfg.CopyDir, ref, lg),
		dumper: checkpoint.New(c, ref, lg),
		keeper: keep.New(c, cfg.KeepLocalMaxBytes, lg),
		ws: &workspace{
			client:  c,
			runID:   runID,
			layers:  layerdir.New(cfg.LayerDir, c.ContentStore()),
			records: checkpoint.Records{LayerDir: cfg.LayerDir, CheckpointDir: cfg.CheckpointDir},
			pod:     ref,
			log:     lg,
		},
	}
	cm.room = &room{cfg: &cm.cfg, client: c, scratch: scratchDir(cfg), pod: ref, log: lg}
	return cm
}

// scratchDir is where a squash stages contents: the layer directory, else
// the copy directory, else the system's temporary directory.
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

// Abort is meant for a signal handler: it stops new pauses, waits briefly
// for pause calls in flight and thaws everything this process paused (see
// freeze.Freezer.Abort).
func (c *Committer) Abort(timeout time.Duration) (int, error) {
	return c.frz.Abort(timeout)
}

// Unpause implements mode=unpause: it thaws every container of the pod that
// this run paused (see freeze.Freezer.Unpause).
func (c *Committer) Unpause(ctx context.Context) (int, error) {
	return c.frz.Unpause(c.nsCtx(ctx))
}

// Release implements mode=release, run when the snapshot of this run ID is
// deleted (keep.Store.Release).
func (c *Committer) Release(ctx context.Context) (removed, marked int, err error) {
	return c.keeper.Release(c.nsCtx(ctx), c.cfg.Params.RunID)
}
