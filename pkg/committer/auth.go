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
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// dockerConfig is the subset of ~/.docker/config.json the committer reads.
// Credential helpers are not supported: the step image ships none.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Auth          string `json:"auth,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// Keychain resolves registry credentials from a docker config.json. Its
// String method and every error it returns are free of secrets.
type Keychain struct {
	auths map[string]authn.AuthConfig
}

// LoadKeychain reads <dir>/config.json. An empty dir or a missing file gives
// an anonymous keychain.
func LoadKeychain(dir string) (*Keychain, error) {
	k := &Keychain{auths: map[string]authn.AuthConfig{}}
	if dir == "" {
		return k, nil
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading docker config %s: %w", path, err)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		// The JSON decoder may quote input in its message; keep only the kind of error.
		return nil, fmt.Errorf("docker config %s is not valid JSON", path)
	}
	for host, a := range cfg.Auths {
		ac := authn.AuthConfig{
			Username:      a.Username,
			Password:      a.Password,
			IdentityToken: a.IdentityToken,
			RegistryToken: a.RegistryToken,
		}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("docker config %s: auth for %s is not valid base64", path, normalizeRegistryKey(host))
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("docker config %s: auth for %s is not of the form user:password", path, normalizeRegistryKey(host))
			}
			ac.Username, ac.Password = user, pass
		}
		k.auths[normalizeRegistryKey(host)] = ac
	}
	return k, nil
}

// normalizeRegistryKey turns a config.json key ("https://host:port/v1/",
// "host:port") into a bare registry host.
func normalizeRegistryKey(k string) string {
	k = strings.TrimPrefix(k, "https://")
	k = strings.TrimPrefix(k, "http://")
	k, _, _ = strings.Cut(k, "/")
	switch k {
	case "docker.io", "registry-1.docker.io":
		return name.DefaultRegistry
	}
	return k
}

// Registries lists the hosts credentials are known for (no secrets).
func (k *Keychain) Registries() []string {
	out := make([]string, 0, len(k.auths))
	for h := range k.auths {
		out = append(out, h)
	}
	return out
}

// Resolve implements authn.Keychain.
func (k *Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k.auths[normalizeRegistryKey(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// String never reveals credentials.
func (k *Keychain) String() string {
	return fmt.Sprintf("docker config keychain for %d registries", len(k.auths))
}
