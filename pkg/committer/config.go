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
	"crypto/x509"
	"io"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
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
