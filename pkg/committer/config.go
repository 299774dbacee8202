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
	// Params are the validated Task parameters; New needs them.
	Params *task.Params
	// Namespace is the containerd namespace, DefaultNamespace when empty.
	Namespace string
	// Keychain resolves registry credentials; anonymous when nil.
	Keychain authn.Keychain
	// WalkingDiffer uses containerd's walking differ, not the overlay one.
	WalkingDiffer bool
	// CopyDir, when set, is where the overlay differ copies a readable
	// upper directory inside the pause (package stage).
	CopyDir string
	// LayerDir, when set, holds the file of each new layer in place of a
	// copy in containerd (package layerdir); both steps must see it.
	LayerDir string
	// ScratchLimit, when not zero, bounds what a commit writes to CopyDir
	// and LayerDir: the commit pod's ephemeral-storage limit.
	ScratchLimit uint64
	// RootCAs verify the registry's certificate; the system's when nil.
	RootCAs *x509.CertPool
	// CheckpointDir is where CRIU writes memory snapshots; containerd and
	// this process must both see it at this path.
	CheckpointDir string
	// ChunkSize sizes upload chunks; upload.DefaultChunkSize when 0.
	ChunkSize int
	// InPause, for tests, runs inside the pause before the diffs; its error
	// fails the commit.
	InPause func(context.Context, []*freeze.Container) error
	// Log receives progress lines; os.Stderr when nil.
	Log io.Writer
}
