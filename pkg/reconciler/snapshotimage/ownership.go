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

package snapshotimage

import (
	"fmt"
	"path"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
)

// Ownership decides which images a deleted snapshot may have deleted: its
// own, never whatever its status names. Whoever may write snapshot status
// (OpenSandbox's controller may, in every namespace) could otherwise name
// another tenant's image there, and the controller would delete it with its
// own credentials.
type Ownership struct {
	// Registry is config-snapshot's registry: a sandbox's images go to
	// <Registry>/<namespace>/<sandbox>/<container> (Repository).
	Registry string
	// TaskRun names the snapshot's commit TaskRun, <namespace>/<name>, and
	// Pushed the images it reported pushing: the TaskRun lives in the
	// operator's namespace, which tenants cannot write. TaskRun is empty
	// once it is gone (deleted by retention, or by an earlier pass of the
	// finalizer): the repository alone is then checked.
	TaskRun string
	Pushed  []name.Digest
}

// Check returns why image, named by a snapshot of sandbox in namespace, is
// not that snapshot's to delete, or nil when it is.
func (o Ownership) Check(image name.Digest, namespace, sandbox string, opts ...name.Option) error {
	if o.Registry == "" {
		return fmt.Errorf("config-snapshot has no %s to check its repository against", config.RegistryKey)
	}
	repo := image.Context()
	own := Repository(o.Registry, namespace, sandbox, path.Base(repo.RepositoryStr()))
	if want, err := name.NewRepository(own, opts...); err != nil || want.Name() != repo.Name() {
		return fmt.Errorf("repository %s is not one of sandbox %s/%s's, %s", repo.Name(), namespace, sandbox,
			Repository(o.Registry, namespace, sandbox, "<container>"))
	}
	if o.TaskRun == "" {
		return nil
	}
	for _, p := range o.Pushed {
		if p.Context().Name() == repo.Name() && p.DigestStr() == image.DigestStr() {
			return nil
		}
	}
	return fmt.Errorf("TaskRun %s did not report pushing it", o.TaskRun)
}
