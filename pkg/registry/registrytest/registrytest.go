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

// Package registrytest holds the registry of the reconcilers' table tests.
package registrytest

import (
	"context"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// Fake holds manifests by reference, records what it is asked, and fails
// as told.
type Fake struct {
	mu sync.Mutex
	// Held maps references (repo@digest or repo:tag) to digests.
	Held map[string]string
	// Checkpoints maps a base (repo@digest) to the checkpoint images that
	// restore from it.
	Checkpoints map[string][]string
	// Deleted and LookedUp list the references deleted and looked up.
	Deleted  []string
	LookedUp []string
	// Secrets lists the Secrets clients were asked for with.
	Secrets []string
	// Err fails every call but CheckpointsOf, which CheckpointsErr fails;
	// ClientErr fails getting a client.
	Err            error
	CheckpointsErr error
	ClientErr      error
}

// For returns the registry.For of f.
func (f *Fake) For() registry.For {
	return func(_ context.Context, access registry.Access) (registry.Client, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.Secrets = append(f.Secrets, access.Secret)
		if f.ClientErr != nil {
			return nil, f.ClientErr
		}
		return f, nil
	}
}

// Digest implements registry.Client.
func (f *Fake) Digest(_ context.Context, ref name.Reference) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.LookedUp = append(f.LookedUp, ref.String())
	if f.Err != nil {
		return "", f.Err
	}
	return f.Held[ref.String()], nil
}

// Delete implements registry.Client.
func (f *Fake) Delete(_ context.Context, ref name.Reference) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Err != nil {
		return f.Err
	}
	f.Deleted = append(f.Deleted, ref.String())
	delete(f.Held, ref.String())
	return nil
}

// CheckpointsOf implements registry.Client.
func (f *Fake) CheckpointsOf(_ context.Context, base name.Digest) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.CheckpointsErr != nil {
		return nil, f.CheckpointsErr
	}
	return f.Checkpoints[base.String()], nil
}
