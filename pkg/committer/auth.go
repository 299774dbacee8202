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
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/dockerconfig"
)

// LoadKeychain reads <dir>/config.json, the docker config Tekton mounts from
// the push Secret. An empty dir or a missing file gives an anonymous keychain.
func LoadKeychain(dir string) (*dockerconfig.Keychain, error) {
	if dir == "" {
		return dockerconfig.Anonymous(), nil
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return dockerconfig.Anonymous(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading docker config %s: %w", path, err)
	}
	return dockerconfig.Parse(b, path)
}
