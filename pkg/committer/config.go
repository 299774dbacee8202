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

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// DefaultNamespace is the containerd namespace the CRI plugin uses.
const DefaultNamespace = "k8s.io"

// Config configures a Committer.
type Config struct {
	// Params are the validated Task parameters, the tunable ones included;
	// New needs them.
	Params *task.Params
	// Namespace is the containerd namespace, DefaultNamespace when empty.
	Namespace string
	// Keychain resolves registry credentials (push only). Anonymous when nil.
	Keychain authn.Keychain
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
